#!/usr/bin/env bash
# Make sure Debian's Chromium and fonts for its text are installed, for the in-browser tests
# (tests/browser). Only `make test` runs it: `make setup` and `make lab` need no browser.
# Idempotent: installs only what is missing, and nothing when all is there. Installing needs
# root (or passwordless sudo) and apt-get; where it cannot, it says so in one line and exits 1
# (`make test` then runs the suite anyway, and the browser tests fail, loudly).
# RESTREAM_CHROMIUM=/path/to/chromium uses that browser instead, installing nothing.
set -euo pipefail

CHROMIUM=/usr/bin/chromium
# The Debian packages to ensure; RESTREAM_CHROMIUM_PACKAGES="..." replaces the list.
read -r -a PACKAGES <<<"${RESTREAM_CHROMIUM_PACKAGES:-chromium fonts-dejavu-core fonts-liberation}"

if [[ -n ${RESTREAM_CHROMIUM:-} && -x ${RESTREAM_CHROMIUM} ]]; then
    exit 0
fi

fail() {
    echo "ensure_chromium: cannot install Chromium for the browser tests (tests/browser will" \
        "fail): $*; as root run: apt-get install -y ${PACKAGES[*]}" >&2
    exit 1
}

installed() {
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true) == installed ]]
}

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
    for package in "${PACKAGES[@]}"; do
        installed "$package" || missing+=("$package")
    done
fi
if [[ -x $CHROMIUM && ${#missing[@]} -eq 0 ]]; then
    exit 0
fi
if [[ ! -x $CHROMIUM && ${#missing[@]} -eq 0 ]]; then
    missing=("${PACKAGES[@]}")
fi

if ! command -v apt-get >/dev/null 2>&1; then
    fail "${missing[*]} missing and apt-get is not available on this machine"
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        fail "${missing[*]} missing and installing needs root (there is no passwordless sudo)"
    fi
fi

echo "ensure_chromium: installing ${missing[*]} with apt-get" >&2
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$LOG" 2>&1; then
    cat "$LOG" >&2
    fail "apt-get update failed"
fi
if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "${missing[@]}" >"$LOG" 2>&1; then
    cat "$LOG" >&2
    fail "apt-get install ${missing[*]} failed"
fi
if [[ ! -x $CHROMIUM ]]; then
    fail "apt-get finished but $CHROMIUM is still missing"
fi
echo "ensure_chromium: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM is installed")" >&2
