"""The victim choice when vLLM's KV pool runs dry while it schedules its running requests.

vLLM's scheduler, in its first-come-first-served mode, takes the victim with
``self.running.pop()`` (the newest) while it walks ``self.running`` by index. RunningList is the
running list with that pop() answered by a chooser: the candidates are the requests the walk has
not reached yet, the current one included (those before it are already in the step), as in
Optimate's own scheduler. Outside a step, or when the walk cannot be followed, pop() is the
list's own.
"""

from __future__ import annotations

from typing import Callable, Optional

# (running, candidate indices) -> the index of the victim.
Chooser = Callable[[list, list], int]


class RunningList(list):
    def __init__(self, items=(), chooser: Optional[Chooser] = None):
        super().__init__(items)
        self.chooser = chooser
        self._walk_index: Optional[int] = None
        self.num_fallbacks = 0

    def __getitem__(self, index):
        if self.chooser is not None and isinstance(index, int):
            self._walk_index = index if index >= 0 else index + len(self)
        return super().__getitem__(index)

    def pop(self, *args):
        if args or self.chooser is None or self._walk_index is None or not 0 <= self._walk_index < len(self):
            return super().pop(*args)
        candidates = list(range(self._walk_index, len(self)))
        try:
            victim = self.chooser(self, candidates)
        except Exception:
            # The chooser (or the view it builds) failed: vLLM's own choice, the newest.
            self.num_fallbacks += 1
            return super().pop()
        if victim not in candidates:
            self.num_fallbacks += 1
            return super().pop()
        return super().pop(victim)
