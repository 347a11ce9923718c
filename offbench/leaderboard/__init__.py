"""Leaderboards: benchmark specs, validated submissions (JSON entries), roll-up statistics, Markdown and HTML."""
