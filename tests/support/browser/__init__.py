"""Browser tests: Debian's Chromium driven by Playwright (never a downloaded browser)."""
