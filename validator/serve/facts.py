"""What a running server says about itself over HTTP: /metrics (cache_config_info),
/v1/models (max_model_len), /version."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

from validator.errors import InfraError, InputError
from validator.rundir.startup import StartupFacts
from validator.serve.startup_log import parse_cache_config_info


def http_get(url: str, timeout: float = 5.0, api_key: str | None = None) -> str:
    req = urllib.request.Request(url)
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode(errors="replace")


def healthy(url: str, timeout: float = 2.0) -> bool:
    """/health answers 200."""
    try:
        http_get(url + "/health", timeout=timeout)
        return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def server_facts(base_url: str, api_key: str | None, facts: StartupFacts | None = None) -> StartupFacts:
    """What a running server says: /metrics (cache_config_info) and /v1/models (max_model_len)."""
    f = facts or StartupFacts()
    try:
        parse_cache_config_info(http_get(base_url + "/metrics"), f)
    except (urllib.error.URLError, OSError) as e:
        raise InfraError(f"cannot read {base_url}/metrics: {e}") from None
    try:
        models = json.loads(http_get(base_url + "/v1/models", api_key=api_key))
        data = models.get("data") or []
        if data and isinstance(data[0].get("max_model_len"), int):
            f.max_model_len = data[0]["max_model_len"]
            f.served_model = data[0].get("id")
        else:
            f.models_error = "GET /v1/models: no model with a max_model_len"
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):  # every request of the load would be refused the same way
            raise InputError(f"vllm.api_key_env: the server refused {'the key' if api_key else 'a request without a key'}"
                             f" (HTTP {e.code} from /v1/models); name the environment variable that holds its "
                             "API key") from None
        f.models_error = f"GET /v1/models: HTTP {e.code}"
    except (urllib.error.URLError, OSError, ValueError, AttributeError) as e:
        f.models_error = f"GET /v1/models: {type(e).__name__}: {e}"[:200]
    return f


def server_version(url: str) -> str | None:
    """The vLLM version a server says it runs (/version), or None."""
    try:
        version = json.loads(http_get(url + "/version")).get("version")
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return None
    return version if isinstance(version, str) else None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0
