"""Limiters: the bounds steps keep to (``weir.WithLimiter`` in Go), set and
read through the limiters API."""

from __future__ import annotations

import uuid

from harness import ServerCase, per_store

import weir


class LimiterTests(ServerCase):
    def test_set_read_change_and_refuse(self) -> None:
        name = "py-" + uuid.uuid4().hex[:10]
        lim = self.client.set_limiter(name, concurrency=4, rate=60, period=60, per_key=2)
        self.assertEqual((lim.name, lim.concurrency, lim.per_key, lim.rate, lim.period, lim.held, lim.queued),
                         (name, 4, 2, 60, "1m0s", 0, 0))
        self.assertIn(name, [x.name for x in self.client.limiters()])
        # A change applies at once; a refused one changes nothing.
        self.client.set_limiter(name, concurrency=2, budget=100_000, period=60)
        for bad in ({"concurrency": -1}, {}, {"rate": 5}, {"concurrency": 1, "per_key": -1}):
            with self.assertRaises(weir.InvalidError):
                self.client.set_limiter(name, **bad)
        got = self.client.limiter(name)
        self.assertEqual((got.concurrency, got.per_key, got.rate, got.budget, got.spent), (2, 0, 0, 100_000, 0))
        with self.assertRaises(weir.NotFoundError):
            self.client.limiter("py-none-" + uuid.uuid4().hex[:6])


per_store(LimiterTests, globals())
