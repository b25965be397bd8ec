"""One line per finished simulation, with an estimate of the time left. Torch-free.

    pace = Pace(total=7, say=lambda m: print(m, file=sys.stderr), what="qwen2.5-7b__sim__lora search")
    pace.done("batch 1 x 1024 tokens", seconds=4.1)
    # qwen2.5-7b__sim__lora search: simulation 1/7 (batch 1 x 1024 tokens) done in 4.1 s; about 25 s left

The estimate is the mean time of the simulations done so far times the number still planned;
``plan(n)`` raises the planned total when more turn out to be needed (a search whose
interpolation check failed simulates more shapes); ``plan(n, at_most=True)`` where the count is a
budget, not a plan (an exact search bisects until it is done, at most its budget): the lines then
say "of at most n", never "n/n ... the last one" followed by "n+1/n+1".
"""
from __future__ import annotations


class Pace:
    def __init__(self, total: int, say, what: str):
        self.total, self.say, self.what = total, say, what
        self.count, self.spent, self.at_most = 0, 0.0, False

    def plan(self, total: int, at_most: bool = False) -> None:
        if total > self.total:
            self.at_most = at_most
        self.total = max(self.total, total)

    def left_s(self) -> float:
        return self.spent / self.count * max(0, self.total - self.count) if self.count else 0.0

    def done(self, label: str, seconds: float) -> None:
        self.count += 1
        self.spent += seconds
        self.plan(self.count)
        left = self.left_s()
        if self.at_most:
            of, tail = f" of at most {self.total}", f"at most about {left:.0f} s left"
        else:
            of = f"/{self.total}"
            tail = f"about {left:.0f} s left" if self.count < self.total else "the last one planned"
        self.say(f"{self.what}: simulation {self.count}{of} ({label}) done in {seconds:.1f} s; {tail}")
