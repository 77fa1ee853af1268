"""Operator keys: the keys of the cross-tenant endpoints `/v1/ops/…` and the status page.

They are random 256-bit secrets stored as SHA-256, like tenants' API keys (`store.hash_key`),
but in a table of their own (`operator_keys`): a tenant key never opens an operator endpoint
and an operator key names no tenant. One active key per name; revoking it ends it.
"""

from __future__ import annotations

import secrets

import asyncpg

from tickwheel.queries import QUERIES
from tickwheel.registry_api.store import hash_key

OPERATOR_KEY_PREFIX = "twop_"  # tells an operator key from a tenant's (`tw_`) at a glance


class OperatorKeys:
    """Operator keys: created (returned once), revoked by name, looked up by key."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def create(self, name: str) -> str:
        key = OPERATOR_KEY_PREFIX + secrets.token_urlsafe(32)
        await self.pool.execute(
            QUERIES["ops_key_insert"], hash_key(key), key[: len(OPERATOR_KEY_PREFIX) + 5], name
        )
        return key

    async def revoke(self, name: str) -> str | None:
        """The revoked key's prefix, or None when `name` has no active key."""
        prefix: str | None = await self.pool.fetchval(QUERIES["ops_key_revoke"], name)
        return prefix

    async def operator_for_key(self, key: str) -> str | None:
        name: str | None = await self.pool.fetchval(QUERIES["ops_operator_by_key"], hash_key(key))
        return name
