"""What a running server says about itself over HTTP: /metrics (cache_config_info),
/v1/models (max_model_len), /version. Every request goes through loadgen.net: to the address the
loopback rule checked, with no ambient proxy and no redirect followed (the key stays with the server
asked)."""

from __future__ import annotations

import json
import socket
from typing import Any

from loadgen import net
from loadgen.net import Pin
from validator.errors import InfraError, InputError
from validator.rundir.startup import StartupFacts
from validator.serve.startup_log import parse_cache_config_info

MAX_BODY = 32 << 20  # a /metrics or /v1/models answer larger than this is not a vLLM server's


class HttpStatus(OSError):
    """An answer other than 200 (a redirect included: never followed)."""

    def __init__(self, code: int):
        super().__init__(f"HTTP {code}")
        self.code = code


def http_get(url: str, timeout: float = 5.0, api_key: str | None = None, pin: Pin | None = None) -> str:
    """GET url (loadgen.net.get_blocking: no event loop, so an interrupt cannot leave half of one), its
    body as text; HttpStatus on anything but 200, OSError on no answer."""

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    status, text = net.get_blocking(url, timeout, headers, MAX_BODY, pin)
    if status is None:
        raise OSError(text)
    if status != 200:
        raise HttpStatus(status)
    return text


def healthy(url: str, timeout: float = 2.0, pin: Pin | None = None) -> bool:
    """/health answers 200."""
    try:
        http_get(url + "/health", timeout=timeout, pin=pin)
        return True
    except (OSError, ValueError):
        return False


def server_facts(
    base_url: str,
    api_key: str | None,
    facts: StartupFacts | None = None,
    want: str | None = None,
    pin: Pin | None = None,
) -> StartupFacts:
    """What a running server says: /metrics (cache_config_info) and /v1/models (the names it serves,
    and the max_model_len of `want`, or of its first model when none is named)."""
    f = facts or StartupFacts()
    shown = net.redact_url(base_url)
    try:
        text = http_get(base_url + "/metrics", pin=pin)
    except OSError as e:
        raise InfraError(f"cannot read {shown}/metrics: {net.redact_url(str(e))}") from None
    try:
        parse_cache_config_info(text, f)
    except (ValueError, TypeError, KeyError, IndexError) as e:
        raise InputError(
            f"--url: {shown}/metrics is not Prometheus text ({type(e).__name__}); is it a vLLM server?"
        ) from None
    try:
        models = json.loads(http_get(base_url + "/v1/models", api_key=api_key, pin=pin))
        data = [d for d in (models.get("data") or []) if isinstance(d, dict) and isinstance(d.get("id"), str)]
        f.served_models = [d["id"] for d in data]
        mine = next((d for d in data if d["id"] == want), None) if want else (data[0] if data else None)
        if mine is not None and isinstance(mine.get("max_model_len"), int):
            f.max_model_len = mine["max_model_len"]
            f.served_model = mine["id"]
        else:
            f.models_error = "GET /v1/models: no model with a max_model_len"
    except HttpStatus as e:
        if e.code in (401, 403):  # every request of the load would be refused the same way
            raise InputError(
                f"vllm.api_key_env: the server refused {'the key' if api_key else 'a request without a key'}"
                f" (HTTP {e.code} from /v1/models); name the environment variable that holds its "
                "API key"
            ) from None
        f.models_error = f"GET /v1/models: HTTP {e.code}"
    except (OSError, ValueError, AttributeError, RecursionError) as e:
        f.models_error = net.redact_url(f"GET /v1/models: {type(e).__name__}: {e}")[:200]
    scheduler_limits(base_url, api_key, f, pin)
    return f


def scheduler_limits(base_url: str, api_key: str | None, f: StartupFacts, pin: Pin | None = None) -> None:
    """max_num_seqs and max_num_batched_tokens as the server runs them, from /server_info's JSON config
    (a dev-mode route: VLLM_SERVER_DEV_MODE=1). Only these two numbers are kept: the answer also
    carries the server's environment, which no run file holds."""
    try:  # the server collects its environment on the first call (subprocesses): more time than /metrics
        info = json.loads(http_get(base_url + "/server_info?config_format=json", 20.0, api_key, pin))
    except HttpStatus as e:
        dev = " (no dev mode: VLLM_SERVER_DEV_MODE unset)" if e.code == 404 else ""
        f.server_config_error = f"GET /server_info: HTTP {e.code}{dev}"
        return
    except (OSError, ValueError, RecursionError) as e:
        f.server_config_error = net.redact_url(f"GET /server_info: {type(e).__name__}: {e}")[:200]
        return
    config = info.get("vllm_config") if isinstance(info, dict) else None
    sched = config.get("scheduler_config") if isinstance(config, dict) else None
    limits = [sched.get(k) if isinstance(sched, dict) else None for k in ("max_num_seqs", "max_num_batched_tokens")]
    if not all(type(v) is int and v > 0 for v in limits):
        f.server_config_json = False  # a vLLM whose /server_info gives its config as text only
        f.server_config_error = (
            "GET /server_info: no JSON scheduler_config with max_num_seqs and max_num_batched_tokens"
        )
        return
    f.server_config_json = True
    f.max_num_seqs, f.max_num_batched_tokens = limits


def server_version(url: str, pin: Pin | None = None) -> str | None:
    """The vLLM version a server says it runs (/version), or None."""
    try:
        version = json.loads(http_get(url + "/version", pin=pin)).get("version")
    except (OSError, ValueError, AttributeError, RecursionError):
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


def model_name(profile: Any, facts: StartupFacts, url: str) -> str:
    """The name the runs send: the profile's, which the server must serve (else exit 2 naming both),
    or the one model the server serves."""
    want, served = profile.model.served_name, facts.served_models
    if served is None:  # /v1/models could not be read (said in startup.max_model_len)
        return want or profile.model.path or "model"
    if want is not None and want not in served:
        raise InputError(
            f"model.served_name: the server at {url} serves {', '.join(map(repr, served)) or 'no model'}, "
            f"not {want!r}; set model.served_name to the name it serves"
        )
    if want is None and len(served) != 1:
        raise InputError(
            f"model.served_name: the server at {url} serves {', '.join(map(repr, served)) or 'no model'}; "
            "name the one to validate in model.served_name"
        )
    return want or served[0]
