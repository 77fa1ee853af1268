"""The handlers docs/CLIENT.md's jobs name, for the worker its examples run against
(`tickwheel worker --handlers client_doc_handlers`): each notes its run in TW_DOC_LOG."""

from __future__ import annotations

import os
from typing import Any

from tickwheel import handler


@handler("reports.build")
async def build_report(ctx: Any, _payload: Any) -> None:
    with open(os.environ["TW_DOC_LOG"], "a") as log:
        log.write(f"{ctx.run_key} {ctx.attempt}\n")
