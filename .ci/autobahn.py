"""The Autobahn TestSuite's cases (run by kosoku) against the relay and a reference server.

The relay runs each case on a relay code of its own, with relay_echo (examples/relay_echo.rs) as
the agent sending every frame back; the reference is Python `websockets` echoing. Prints both
scores, and the details of each failed relay case; exits 1 on any relay case that failed.

    python .ci/autobahn.py <voxa binary> <relay_echo binary>
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
import sys
import tempfile
import time
from collections import Counter

import websockets
from kosoku import FailureError, run_fuzzingclient

# Compression (permessage-deflate) is not implemented by the relay: 12.* and 13.* would only say so.
SKIPPED = ["12.*", "13.*"]
# The relay's message limit (MAX_FRAME_LEN), given to the reference too.
MAX_MESSAGE = 16 << 20
# Cases run at once on each side.
PARALLEL = 2
KINDS = ["OK", "NON-STRICT", "INFORMATIONAL", "UNIMPLEMENTED", "FAILED"]


def verdict(case) -> str:
    """A case's one-word result: FAILED unless both its exchange and its close passed."""
    if not case.passed:
        return "FAILED"
    return case.behavior.value


async def run_cases(url_for_case, cases: list[str] | None) -> list:
    """Runs `cases` (all but SKIPPED when None), each on the URL `url_for_case` gives for it."""
    if cases is None:
        try:
            return await run_fuzzingclient(await url_for_case(None), None, SKIPPED, concurrency=PARALLEL)
        except FailureError as failure:
            return failure.results
    limit = asyncio.Semaphore(PARALLEL)

    async def one(case_id: str) -> list:
        async with limit:
            url = await url_for_case(case_id)
            try:
                return await run_fuzzingclient(url, [case_id])
            except FailureError as failure:
                return failure.results

    results = [case for batch in await asyncio.gather(*(one(c) for c in cases)) for case in batch]
    return sorted(results, key=lambda case: [int(part) for part in case.case_id.split(".")])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def wait_healthy(port: int, deadline: float) -> None:
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            status = await reader.readline()
            writer.close()
            if b" 200 " in status:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"autobahn: the relay did not answer /healthz on port {port}")
        await asyncio.sleep(0.1)


class Echo:
    """The relay_echo agent: hands it a code, waits until it holds it."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.waiting: dict[str, asyncio.Future] = {}
        self.reader = asyncio.create_task(self.read())

    async def read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            word, _, code = line.decode().strip().partition(" ")
            future = self.waiting.pop(code, None)
            if future is not None and not future.done():
                future.set_result(word == "ready")
        for future in self.waiting.values():
            if not future.done():
                future.set_result(False)

    async def hold(self, code: str) -> None:
        assert self.process.stdin is not None
        future = asyncio.get_running_loop().create_future()
        self.waiting[code] = future
        self.process.stdin.write(f"{code}\n".encode())
        await self.process.stdin.drain()
        if not await asyncio.wait_for(future, 30):
            raise SystemExit("autobahn: relay_echo could not hold a code (see its stderr)")


def score_line(name: str, results: list) -> str:
    counts = Counter(verdict(case) for case in results)
    shown = ", ".join(f"{counts[kind]} {kind}" for kind in KINDS if counts[kind] or kind in ("OK", "FAILED"))
    return f"autobahn: {name:<24} {len(results)} cases: {shown}"


async def reference_echo(ws) -> None:
    async for message in ws:
        await ws.send(message)


async def main() -> int:
    voxa, relay_echo = sys.argv[1], sys.argv[2]
    # The reference logs every connection the cases break on purpose; its verdicts are enough.
    logging.getLogger("websockets").setLevel(logging.CRITICAL)
    started = time.monotonic()
    async with websockets.serve(reference_echo, "127.0.0.1", 0, max_size=MAX_MESSAGE, compression=None) as server:
        ref_port = server.sockets[0].getsockname()[1]

        async def reference_url(_case):
            return f"ws://127.0.0.1:{ref_port}/"

        reference = await run_cases(reference_url, None)
    reference_time = time.monotonic() - started
    case_ids = [case.case_id for case in reference]

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="voxa-autobahn-") as home:
        relay = await asyncio.create_subprocess_exec(
            voxa, "relay", "--home", home, "--listen", f"127.0.0.1:{port}", "-q",
            stdin=asyncio.subprocess.DEVNULL,
        )
        agent = await asyncio.create_subprocess_exec(
            relay_echo, f"ws://127.0.0.1:{port}", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )
        try:
            await wait_healthy(port, time.monotonic() + 30)
            echo = Echo(agent)

            async def relay_url(_case):
                code = secrets.token_hex(16)
                await echo.hold(code)
                # No presence notices: the cases count every frame the socket receives.
                return f"ws://127.0.0.1:{port}/ws?code={code}&presence=none"

            relay_started = time.monotonic()
            results = await run_cases(relay_url, case_ids)
            relay_time = time.monotonic() - relay_started
        finally:
            for process in (agent, relay):
                if process.returncode is None:
                    process.terminate()
                    await process.wait()

    for case in results:
        if verdict(case) == "FAILED":
            print(f"autobahn: relay FAILED {case.case_id}: {case.description.strip()}")
            print(f"    {case.behavior.value}: {case.result}")
            print(f"    close {case.behavior_close.value}: {case.result_close}")
    for kind in ("NON-STRICT", "INFORMATIONAL"):
        ids = [case.case_id for case in results if verdict(case) == kind]
        if ids:
            print(f"autobahn: relay {kind}: {' '.join(ids)}")
    print(f"autobahn: skipped {', '.join(SKIPPED)} (permessage-deflate is not implemented)")
    print(score_line("relay + relay_echo", results) + f" in {relay_time:.0f} s")
    print(score_line("reference (websockets)", reference) + f" in {reference_time:.0f} s")
    by_case = {case.case_id: verdict(case) for case in reference}
    differ = [f"{c.case_id} {verdict(c)}/{by_case.get(c.case_id)}" for c in results if verdict(c) != by_case.get(c.case_id)]
    if differ:
        print(f"autobahn: relay/reference differ on {len(differ)}: {' '.join(differ)}")
    if len(results) != len(case_ids):
        print(f"autobahn: the relay ran {len(results)} of {len(case_ids)} cases")
        return 1
    failed = sum(verdict(case) == "FAILED" for case in results)
    print(f"autobahn: {len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
