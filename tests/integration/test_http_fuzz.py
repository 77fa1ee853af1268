"""Schema-driven fuzzing of the registry HTTP API: no input makes it answer 5xx.

Schemathesis reads `/openapi.json` from the ASGI app and generates requests for every
operation, valid and invalid, with a real tenant's key. Hooks steer part of the traffic at the
interesting paths — bodies with a valid schedule (so the store is reached) and ids of jobs that
exist (so PATCH merges, pause/resume and runs run against real rows).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any, cast

import asyncpg
import httpx
import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.python import asgi as schemathesis_asgi

from tickwheel.registry_api.document import Limits
from tickwheel.registry_api.http import create_app
from tickwheel.registry_api.ops.keys import OperatorKeys
from tickwheel.registry_api.store import RegistryStore

pytestmark = pytest.mark.integration

# Examples per operation and generation mode; raise it (TICKWHEEL_FUZZ_EXAMPLES=2000) to hunt.
EXAMPLES_PER_OPERATION = int(os.environ.get("TICKWHEEL_FUZZ_EXAMPLES", "50"))
SHARDS = 64
KNOWN_IDS = ("fuzz-cron", "fuzz-once", "fuzz-paused")
VALID_TIMINGS: tuple[dict[str, Any], ...] = (
    {"schedule": "*/5 * * * *", "at": None},
    {"schedule": "0 9 * * MON-FRI", "at": None, "timezone": "Europe/Berlin"},
    {"schedule": None, "at": "2031-03-30T02:30:00+02:00"},
)
OPERATIONS = (
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/{job_id}"),
    ("PATCH", "/v1/jobs/{job_id}"),
    ("POST", "/v1/jobs/{job_id}/pause"),
    ("POST", "/v1/jobs/{job_id}/resume"),
    ("GET", "/v1/jobs/{job_id}/runs"),
    ("GET", "/v1/jobs/{job_id}/preview"),
    ("POST", "/v1/jobs/{job_id}/trigger"),
    ("POST", "/v1/jobs/{job_id}/backfill"),
    ("DELETE", "/v1/jobs/{job_id}"),
    ("PUT", "/v1/calendars/{name}"),
    ("GET", "/v1/calendars"),
    ("GET", "/v1/calendars/{name}"),
    ("DELETE", "/v1/calendars/{name}"),
    ("GET", "/healthz"),
    ("GET", "/metrics"),
    # Operators' endpoints: with the tenant's key every request must end 403, never 5xx.
    ("GET", "/v1/ops/shards"),
    ("GET", "/v1/ops/throughput"),
    ("GET", "/v1/ops/dead"),
    ("GET", "/v1/ops/tenants"),
    ("GET", "/v1/ops/jobs"),
    ("GET", "/v1/ops/csrf"),
    ("POST", "/v1/ops/jobs/{tenant}/{job_id}/{action}"),
    ("GET", "/v1/ops/jobs/{tenant}/{job_id}"),
    ("POST", "/v1/ops/jobs/{tenant}/{job_id}/trigger"),
    ("POST", "/v1/ops/jobs/{tenant}/{job_id}/backfill"),
    ("GET", "/v1/ops/runs/{run_key}"),
    ("GET", "/v1/ops/dead-letters"),
    ("POST", "/v1/ops/dead-letters/replay"),
    ("GET", "/v1/ops/replays/{audit_id}"),
)
# With an operator key (and a CSRF token), the operators' endpoints: past the key, their own
# input checks.
OPERATOR_OPERATIONS = [(method, path) for method, path in OPERATIONS if path.startswith("/v1/ops/")]
_SEEDED: dict[str, str] = {}  # the fuzzing tenant's name, once made
LIMITS = Limits(
    payload_limit_bytes=8192, target_allowlist=("https://hooks.example.test/",), shards=SHARDS
)


async def _seed(dsn: str, key: str | None) -> str:
    """The fuzzing tenant (made when `key` is None) with the jobs KNOWN_IDS name, as seeded."""
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        store = RegistryStore(pool, SHARDS)
        if key is None:
            _SEEDED["tenant"] = f"fuzz-{uuid.uuid4().hex[:12]}"
            key = await store.create_tenant(_SEEDED["tenant"])
        headers = {"Authorization": f"Bearer {key}"}
        transport = httpx.ASGITransport(app=create_app(store, LIMITS))
        async with httpx.AsyncClient(
            transport=transport, base_url="http://registry.test", headers=headers
        ) as client:
            for job_id, timing in zip(KNOWN_IDS, VALID_TIMINGS, strict=True):
                doc = {"id": job_id, "handler": "fuzz.h", **timing}
                seeded = await client.post("/v1/jobs", json=doc)
                assert seeded.status_code in (200, 201), seeded.text
            paused = await client.post(f"/v1/jobs/{KNOWN_IDS[2]}/pause")
            assert paused.status_code == 200, paused.text
        return key
    finally:
        await pool.close()


@pytest.fixture(scope="module")
def tenant_key(module_db_dsn: str) -> str:
    return asyncio.run(_seed(module_db_dsn, None))


@pytest.fixture(scope="module")
def operator_key(module_db_dsn: str) -> str:
    async def create() -> str:
        pool = await asyncpg.create_pool(module_db_dsn, min_size=1, max_size=1)
        try:
            return await OperatorKeys(pool).create(f"fuzz-{uuid.uuid4().hex[:8]}")
        finally:
            await pool.close()

    return asyncio.run(create())


@pytest.fixture
def api_key(module_db_dsn: str, tenant_key: str) -> str:
    """The tenant's key, with its known jobs put back as seeded (earlier runs may delete or
    patch them)."""
    return asyncio.run(_seed(module_db_dsn, tenant_key))


@pytest.fixture(scope="module")
def fuzz_app(module_db_dsn: str) -> Iterator[FastAPI]:
    """The app with its pool opened by the ASGI lifespan.

    Schemathesis serves the app from an event loop thread of its own; an asyncpg pool belongs
    to the loop that made it, so the pool must be made there, at lifespan startup.
    """
    store = RegistryStore(cast(asyncpg.Pool, None), SHARDS)
    app = create_app(store, LIMITS)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        store.pool = await asyncpg.create_pool(module_db_dsn, min_size=1, max_size=4)
        try:
            yield
        finally:
            await store.pool.close()

    app.router.lifespan_context = lifespan
    yield app
    # Close the pool now, not at interpreter exit: the module's database is dropped next.
    schemathesis_asgi.shutdown_lifespans()


@pytest.fixture(scope="module")
def api_schema(fuzz_app: FastAPI) -> schemathesis.BaseSchema:
    loaded = schemathesis.openapi.from_asgi("/openapi.json", fuzz_app)

    @loaded.hook
    def flatmap_path_parameters(
        context: schemathesis.HookContext, path_parameters: dict[str, Any] | None
    ) -> st.SearchStrategy[dict[str, Any] | None]:
        if not isinstance(path_parameters, dict) or "job_id" not in path_parameters:
            return st.just(path_parameters)
        known = [{**path_parameters, "job_id": job_id} for job_id in KNOWN_IDS]
        if "tenant" in path_parameters:  # the operators' paths name the tenant too
            known = [{**k, "tenant": _SEEDED["tenant"]} for k in known if _SEEDED]
        return st.sampled_from([path_parameters, *known])

    @loaded.hook
    def flatmap_body(context: schemathesis.HookContext, body: Any) -> st.SearchStrategy[Any]:
        operation = context.operation
        if (
            operation is None
            or not isinstance(body, dict)
            or (operation.method.upper(), operation.path) != ("POST", "/v1/jobs")
        ):
            return st.just(body)
        fixed = [
            {**body, **timing, "handler": "fuzz.h", "target": None} for timing in VALID_TIMINGS
        ]
        return st.sampled_from([body, *fixed])

    return loaded


def test_every_operation_of_the_schema_is_fuzzed(api_schema: schemathesis.BaseSchema) -> None:
    """The OpenAPI document has exactly the operations listed here, so none goes unfuzzed."""
    found = set()
    for result in api_schema.get_all_operations():
        assert isinstance(result, Ok), f"schemathesis cannot read an operation: {result}"
        found.add((result.ok().method.upper(), result.ok().path))
    assert found == set(OPERATIONS)


# Negative data needs an input to break; /healthz and /metrics take none.
FUZZED = [
    pytest.param(method, path, mode, id=f"{method} {path} {mode}")
    for method, path in OPERATIONS
    for mode in GenerationMode
    if mode is GenerationMode.POSITIVE or path.startswith("/v1/")
]


@pytest.mark.parametrize(("method", "path", "mode"), FUZZED)
def test_no_input_makes_the_api_answer_5xx(
    api_schema: schemathesis.BaseSchema, api_key: str, method: str, path: str, mode: GenerationMode
) -> None:
    """An operation answers generated requests, schema-valid or not, without a 5xx."""
    _fuzz(api_schema[path][method], mode, {"Authorization": f"Bearer {api_key}"})


def _fuzz(operation: Any, mode: GenerationMode, headers: dict[str, str]) -> None:
    """Generated requests of `mode` to `operation` with `headers`: none may answer 5xx."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case: schemathesis.Case[Any]) -> None:
        case.call_and_validate(headers=headers, checks=[not_a_server_error])

    fuzz()


@pytest.mark.parametrize(
    ("method", "path", "mode"),
    [
        pytest.param(method, path, mode, id=f"operator {method} {path} {mode}")
        for method, path in OPERATOR_OPERATIONS
        for mode in GenerationMode
    ],
)
def test_no_input_makes_the_operators_endpoints_answer_5xx(
    api_schema: schemathesis.BaseSchema,
    fuzz_app: FastAPI,
    api_key: str,
    operator_key: str,
    method: str,
    path: str,
    mode: GenerationMode,
) -> None:
    """With an operator key and a valid CSRF token, no generated request to an operators'
    endpoint gets a 5xx: what is past the key is checked as carefully as what is before it."""
    token = fuzz_app.state.csrf_tokens.issue(operator_key)
    headers = {"Authorization": f"Bearer {operator_key}", "X-CSRF-Token": token}
    _fuzz(api_schema[path][method], mode, headers)
