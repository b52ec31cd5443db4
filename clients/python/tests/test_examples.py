"""The README's examples, run as they are against the test server."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import unittest
from pathlib import Path

from harness import ServerCase, per_store

CLIENT = Path(__file__).resolve().parent.parent
EXAMPLE = CLIENT / "examples" / "llm_step.py"


class ExampleTests(ServerCase):
    def test_the_llm_step_streams_each_token_once(self) -> None:
        env = dict(os.environ, WEIR_URL=self.server.url, WEIR_TOKEN=self.server.token, PYTHONPATH=str(CLIENT))
        out = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        outcomes = {int(ln.split()[1].rstrip(":")): ast.literal_eval(ln.split(":", 1)[1].strip())
                    for ln in lines if ln.startswith("attempt ") and "failed" not in ln}
        self.assertEqual(sorted(outcomes), [1, 2], out.stdout)
        # Attempt 1 sent some tokens before it failed (its last ones may
        # still have been buffered); attempt 2 adopted exactly those.
        first = outcomes[1].get("appended", 0)
        self.assertEqual(outcomes[2], {"adopted": first, "appended": 10 - first} if first else {"appended": 10})
        self.assertIn("live reader saw: Exactly-once means each token reaches the reader once.", lines)
        self.assertIn("committed view:  Exactly-once means each token reaches the reader once.", lines)

    def test_the_readme_hooks_example(self) -> None:
        """The README's hooks example, as it is: a demo.approval run resumed by a
        delivery, sent twice with its key."""
        readme = (CLIENT / "README.md").read_text(encoding="utf-8")
        section = readme[readme.index("### Hooks"):]
        code = section[section.index("```python\n") + len("```python\n"):]
        code = code[: code.index("```")]
        env = dict(os.environ, WEIR_URL=self.server.url, WEIR_TOKEN=self.server.token, PYTHONPATH=str(CLIENT))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(len(lines), 3, out.stdout)
        self.assertRegex(lines[0], r"^HookDelivery\(run_id='run_\w+', op=1, seq=\d+, count=1, duplicate=False, closed=False\)$")
        self.assertEqual(lines[1], "sent again: True True")
        self.assertRegex(lines[2], r"^\{'token': 'order-\w{8}', 'approved': True, 'payload': \{'by': 'ann', 'ok': True\}\}$")

    def test_the_readme_messages_example(self) -> None:
        """The README's messages example, as it is: a demo.chat run sent three
        messages, followed through its run event ``status`` until done."""
        readme = (CLIENT / "README.md").read_text(encoding="utf-8")
        section = readme[readme.index("### Messages and run events"):]
        code = section[section.index("```python\n") + len("```python\n"):]
        code = code[: code.index("```")]
        env = dict(os.environ, WEIR_URL=self.server.url, WEIR_TOKEN=self.server.token, PYTHONPATH=str(CLIENT))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=90)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(len(lines), 8, out.stdout)
        for line in lines[:3]:
            self.assertRegex(line, r"^MessageSent\(run_id='run_\w+', topic='user', seq=\d+, duplicate=False\)$")
        self.assertEqual(lines[3:7], ["{'state': 'done', 'turns': 2}", "2", "you said: hello there",
                                      "you said: how are you?"])
        self.assertEqual(lines[7], "(TopicMessages(topic='user', received=3, taken=3, left=0),)")


class ReadmeTests(unittest.TestCase):
    def test_the_readme_shows_the_example_as_it_is(self) -> None:
        readme = (CLIENT / "README.md").read_text(encoding="utf-8")
        code = EXAMPLE.read_text(encoding="utf-8")
        body = code[code.index("import threading"):code.index("# end snippet")]
        self.assertTrue(body in readme, "README.md's example differs from examples/llm_step.py: copy it over")


per_store(ExampleTests, globals())
