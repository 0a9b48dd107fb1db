"""The seed's section 4.2 example runs as written (bar its import lines) on the embedded model.

The example loops forever, adding a request and stepping each turn; the test runs it until it
prints its first finished request, counting turns rather than waiting on time. Its model name
(a Hugging Face id no test machine has) is pointed at the embedded model.
"""

import asyncio
import re
from pathlib import Path

EXAMPLE = Path(__file__).with_name("seed_integration_example.py")


class _Stop(Exception):
    pass


def test_seed_integration_example_runs(model, monkeypatch, capsys):
    source = EXAMPLE.read_text()
    assert source.count('"meta-llama/Llama-2-7b-chat-hf"') == 1
    code = compile(source.replace('"meta-llama/Llama-2-7b-chat-hf"', repr(model)), str(EXAMPLE), "exec")
    namespace = {"__name__": "seed_example"}
    exec(code, namespace)

    printed = []
    turns = 0

    async def next_turn(_seconds):
        nonlocal turns
        turns += 1
        printed.extend(line for line in capsys.readouterr().out.splitlines() if line)
        if printed or turns > 600:
            raise _Stop

    monkeypatch.setattr(asyncio, "sleep", next_turn)
    try:
        asyncio.run(namespace["main"]())
    except _Stop:
        pass
    assert printed, f"no request finished in {turns} turns"
    assert all(re.fullmatch(r"Request \d+: .*", line) for line in printed), printed
    # One request added per turn, each asking for up to 100 tokens: the first finishes within
    # 100 steps of its admission.
    assert turns <= 101, turns
