"""The profile's sections in the order a profile lists them, and every field's rule, read from the
section classes (sections.py, judged.py)."""

from __future__ import annotations

from dataclasses import fields

from validator.profile.judged import QualitySection, SloSection, SweepSection, TolerancesSection
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

# the sections, in the order a profile lists them
SECTIONS: dict[str, type] = {
    "model": ModelSection,
    "hardware": HardwareSection,
    "cache": CacheSection,
    "limits": LimitsSection,
    "workload": WorkloadSection,
    "slo": SloSection,
    "vllm": VllmSection,
    "observe": ObserveSection,
    "tolerances": TolerancesSection,
    "sweep": SweepSection,
    "quality": QualitySection,
}

# every field's rule by section ("" for the top level), read from the section classes
SCHEMA: dict[str, dict[str, Field]] = {
    "": {
        "name": Field("str", None, "A label for reports; defaults to the file name."),
        "description": Field("str", None, "Free text for people."),
    },
    **{name: {f.name: f.metadata["rule"] for f in fields(cls)} for name, cls in SECTIONS.items()},
}
