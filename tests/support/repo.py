"""Where the checkout is, for tests that read its docs, examples, chart or sources."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
