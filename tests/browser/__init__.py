"""In-browser tests: JupyterLab on 127.0.0.1 driven through Debian's Chromium by Playwright."""
