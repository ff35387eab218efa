"""The secret detector measured (issue #13 item 4): recall on a corpus of key formats, false positives on
ordinary chat (the LoCoMo conversations), and cost per turn. With ``--detect-secrets PYTHON`` it also runs
detect-secrets 1.5.0 (installed in another interpreter) over the same texts for comparison.

    .venv/bin/python bench/secret_detection.py [--detect-secrets /path/to/venv/bin/python]

Keys are generated here (random characters in each vendor's published layout): none is real.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import subprocess
import sys
import time
from pathlib import Path

from tempomem.storage.secrets import redact

REPO = Path(__file__).resolve().parents[1]
LOCOMO = Path(
    os.environ.get("TEMPOMEM_LOCOMO", REPO.parent / "shared" / "data" / "locomo" / "locomo-dev.json")
)
rng = random.Random(7)
A = string.ascii_letters + string.digits


def r(n: int, alphabet: str = A) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


FORMATS = {
    "openai": lambda: "sk-" + r(48),
    "openai-proj": lambda: "sk-proj-" + r(64, A + "-_"),
    "openai-svcacct": lambda: "sk-svcacct-" + r(48, A + "-_"),
    "anthropic": lambda: "sk-ant-api03-" + r(93, A + "-_") + "AA",
    "aws-access-key": lambda: "AKIA" + r(16, string.ascii_uppercase + string.digits),
    "stripe-live": lambda: "sk_live_" + r(24),
    "github-classic": lambda: "ghp_" + r(36),
    "github-fine-grained": lambda: "github_pat_" + r(22) + "_" + r(59),
    "gitlab": lambda: "glpat-" + r(20, A + "-_"),
    "slack-bot": lambda: "xoxb-" + r(11, string.digits) + "-" + r(12, string.digits) + "-" + r(24),
    "google-api": lambda: "AIza" + r(35, A + "-_"),
    "jwt": lambda: "eyJhbGciOiJIUzI1NiJ9." + r(40, A + "-_") + "." + r(43, A + "-_"),
    "sendgrid": lambda: "SG." + r(22, A + "-_") + "." + r(43, A + "-_"),
    "huggingface": lambda: "hf_" + r(34),
    "npm": lambda: "npm_" + r(36),
    "pem": lambda: "-----BEGIN RSA PRIVATE KEY-----\n" + r(64, A + "+/") + "\n-----END RSA PRIVATE KEY-----",
    "url-password": lambda: f"postgres://admin:{r(16)}@db.internal:5432/app",  # checked: the password
    "labelled-api-key": lambda: f"api key: {r(10, string.ascii_lowercase)}-{r(6, string.digits)}",
    "labelled-password": lambda: f"password = {r(8)}9!",
}
CONTEXTS = ["here is my key {}", "{}", "can you store {} for later?", "the token {} stopped working"]


def corpus() -> list[tuple[str, str, str]]:
    out = []
    for name, make in FORMATS.items():
        for context in CONTEXTS:
            secret = make()
            out.append((name, context.format(secret), secret))
    return out


def locomo_turns() -> list[str]:
    if not LOCOMO.exists():
        return []
    texts = []
    for sample in json.loads(LOCOMO.read_text()):
        conv = sample["conversation"]
        for key, value in conv.items():
            if key.startswith("session_") and isinstance(value, list):
                texts += [t["text"] for t in value if t.get("text")]
    return texts


def detect_secrets_counts(python: str, texts: list[str]) -> tuple[list[int], float]:
    """How many secrets detect-secrets' default plugins find per text, and seconds per text. Its two
    high-entropy plugins are left out: scanning a single string (``scan_line``) they flag almost every
    word of ordinary chat (2,759 of the 2,760 LoCoMo turns when measured here)."""
    script = (
        "import json, sys, time\n"
        "from detect_secrets.core.scan import scan_line\n"
        "from detect_secrets.settings import default_settings\n"
        "texts = json.load(sys.stdin)\n"
        "with default_settings():\n"
        "    start = time.perf_counter()\n"
        "    counts = [sum(1 for line in t.splitlines() or [''] for f in scan_line(line)\n"
        "                  if 'High Entropy' not in f.type) for t in texts]\n"
        "    spent = time.perf_counter() - start\n"
        "print(json.dumps([counts, spent / max(1, len(texts))]))\n"
    )
    done = subprocess.run(
        [python, "-c", script], input=json.dumps(texts), capture_output=True, text=True, check=True
    )
    counts, per_text = json.loads(done.stdout)
    return counts, per_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--detect-secrets", metavar="PYTHON", help="an interpreter with detect-secrets")
    args = parser.parse_args()
    keys = corpus()
    found = {name: 0 for name in FORMATS}
    leaked = 0
    for name, text, secret in keys:
        redacted, n = redact(text)
        found[name] += int(n > 0)
        must_vanish = secret.split(":")[2].split("@")[0] if name == "url-password" else secret
        leaked += int(must_vanish.splitlines()[0] in redacted or must_vanish[-12:] in redacted)
    per_format = ", ".join(f"{k} {v}/{len(CONTEXTS)}" for k, v in found.items())
    total = sum(found.values())
    print(
        f"tempomem redact: recall {total}/{len(keys)} ({total / len(keys):.1%}); secret text left: {leaked}"
    )
    print(f"  per format: {per_format}")
    chat = locomo_turns()
    if chat:
        start = time.perf_counter()
        flagged = [t for t in chat if redact(t)[1]]
        spent = (time.perf_counter() - start) / len(chat)
        print(
            f"tempomem redact on {len(chat)} LoCoMo turns: {len(flagged)} redacted "
            f"({len(flagged) / len(chat):.3%}), {spent * 1e6:.1f} µs per turn"
        )
        for text in flagged[:5]:
            print(f"  false positive: {text[:100]!r}")
    else:
        print(f"LoCoMo data not found at {LOCOMO} (set TEMPOMEM_LOCOMO): false positives not measured")
    if args.detect_secrets:
        counts, per_text = detect_secrets_counts(args.detect_secrets, [t for _, t, _ in keys])
        hits = {name: 0 for name in FORMATS}
        for (name, _, _), n in zip(keys, counts, strict=True):
            hits[name] += int(n > 0)
        total_ds = sum(hits.values())
        print(
            "detect-secrets 1.5.0 (default plugins without high entropy): "
            f"recall {total_ds}/{len(keys)} ({total_ds / len(keys):.1%})"
        )
        print("  per format: " + ", ".join(f"{k} {v}/{len(CONTEXTS)}" for k, v in hits.items()))
        if chat:
            counts, per_text = detect_secrets_counts(args.detect_secrets, chat)
            flagged_ds = sum(1 for n in counts if n)
            print(
                f"detect-secrets on {len(chat)} LoCoMo turns: {flagged_ds} flagged "
                f"({flagged_ds / len(chat):.3%}), {per_text * 1e6:.1f} µs per turn"
            )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
