"""Deployment profiles: YAML, validated at load against one schema (sections.py), parsed once into
one typed value per section (load.py: Profile). Unknown keys are refused; errors name the field
path and the fix. docs/profiles.md documents the same fields and a test keeps them in step."""

from validator.profile.judged import SloSection, SweepSection, TolerancesSection
from validator.profile.load import Profile, from_dict, load, override
from validator.profile.schema import SCHEMA, SECTIONS
from validator.profile.sections import (
    CacheSection,
    Field,
    HardwareSection,
    LimitsSection,
    ModelSection,
    ObserveSection,
    VllmSection,
    WorkloadSection,
)

__all__ = [
    "SCHEMA",
    "SECTIONS",
    "CacheSection",
    "Field",
    "HardwareSection",
    "LimitsSection",
    "ModelSection",
    "ObserveSection",
    "Profile",
    "SloSection",
    "SweepSection",
    "TolerancesSection",
    "VllmSection",
    "WorkloadSection",
    "from_dict",
    "load",
    "override",
]
