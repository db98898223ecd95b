#!/bin/sh
# Prints 0 when Debian's Chromium is there for the app's real-browser test (tests/app/test_browser.py), after
# installing it with apt-get where this machine can (root, or passwordless sudo); prints 1, with a warning on
# stderr, when it cannot: `make test` then skips that one test (TRIPATH_SKIP_BROWSER=1) instead of failing.
# TRIPATH_SKIP_BROWSER=1 in the environment skips the install and the test. The install is announced on stderr
# before apt-get starts (on a bare Debian 12 it is chromium and about 114 other packages), then with the exact
# count and download size apt-get computes for this machine. Playwright's own browser download is never used.
have() { [ -x /usr/bin/chromium ] || [ -x /usr/bin/chromium-browser ] || command -v chromium >/dev/null 2>&1; }
if [ "${TRIPATH_SKIP_BROWSER:-}" = 1 ]; then
    have || echo "TRIPATH_SKIP_BROWSER=1: Chromium not installed, tests/app/test_browser.py is SKIPPED" >&2
    echo 1
    exit 0
fi
if ! have && command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO="none"; fi
    if [ "$SUDO" != none ]; then
        echo "installing Debian's chromium with apt-get for the real-browser test (about 115 packages on a bare" \
             "Debian 12); set TRIPATH_SKIP_BROWSER=1 to skip it" >&2
        if $SUDO apt-get update -q >&2; then
            # the exact plan: one line per package to fetch, with its size in bytes (third field)
            $SUDO apt-get install --print-uris -qq chromium 2>/dev/null \
                | awk '{n++; b+=$3} END {printf "apt-get: %d packages to install, %.0f MB to download\n", n, b/1e6}' >&2
            DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium >&2 \
                || echo "WARNING: could not install chromium with apt-get" >&2
        else
            echo "WARNING: apt-get update failed: chromium not installed" >&2
        fi
    fi
fi
if have; then
    echo 0
else
    echo "WARNING: no Chromium on this machine: tests/app/test_browser.py is SKIPPED (install Debian's chromium to run it)" >&2
    echo 1
fi
