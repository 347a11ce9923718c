"""A chat-completions server on 127.0.0.1 for the language-model agent's tests: behind it a scripted player that
reads the prompt's pull history and answers as UCB1 would, and a script of misbehaviours (malformed answers,
stalls, rate limits, refusals). It is test infrastructure only: no result is ever made with it."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

PULL = re.compile(r"pull \d+: arm (\d+), reward ([-\d.e]+)")
ARMS = re.compile(r"with (\d+) arms")


def ucb_answer(messages: list[dict]) -> int:
    """UCB1 (c = 2, lowest index on ties, every arm once first) from the history written in the prompt."""
    system, user = messages[0]["content"], messages[1]["content"]
    arms = int(ARMS.search(system).group(1))
    mine = user.split("Your pulls so far")[1]
    counts, sums = np.zeros(arms), np.zeros(arms)
    for arm, reward in PULL.findall(mine):
        counts[int(arm)] += 1
        sums[int(arm)] += float(reward)
    if (counts == 0).any():
        return int(np.argmax(counts == 0))
    return int(np.argmax(sums / counts + np.sqrt(2 * math.log(counts.sum()) / counts)))


class ChatServer:
    """An OpenAI-compatible /v1/chat/completions. `script` is a list of behaviours used in turn by successive
    requests ("ok", "prose", "slow", "429", "401", "garbage"); after it runs out every answer is "ok"."""

    def __init__(self, script=()):
        self.script, self.requests, self.headers = list(script), [], []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.headers.append(dict(self.headers))
                behaviour = server.script.pop(0) if server.script else "ok"
                if behaviour == "429":
                    self.send_response(429)
                    self.send_header("Retry-After", "0.05")
                    self.end_headers()
                    return
                if behaviour == "401":
                    self.send_response(401)
                    self.end_headers()
                    self.wfile.write(b"bad key")
                    return
                if behaviour == "slow":
                    time.sleep(0.6)
                text = {"prose": "I would pull arm 1 now.", "garbage": "ARM: 99"}.get(behaviour, f"ARM: {ucb_answer(body['messages'])}")
                reply = json.dumps(
                    {
                        "choices": [{"message": {"role": "assistant", "content": text}}],
                        "usage": {"prompt_tokens": 11, "completion_tokens": 3},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
