#!/bin/sh
# Prints 0 when Debian's Chromium is there for the app's real-browser test (tests/app/test_browser.py), after
# installing it with apt-get where this machine can (root, or passwordless sudo); prints 1, with a warning on
# stderr, when it cannot: `make test` then skips that one test (TRIPATH_SKIP_BROWSER=1) instead of failing.
# Playwright's own browser download is never used.
have() { [ -x /usr/bin/chromium ] || [ -x /usr/bin/chromium-browser ] || command -v chromium >/dev/null 2>&1; }
if ! have && command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO="none"; fi
    if [ "$SUDO" != none ]; then
        echo "installing Debian's chromium for the real-browser test (apt-get)" >&2
        { $SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium; } >&2 \
            || echo "WARNING: could not install chromium with apt-get" >&2
    fi
fi
if have; then
    echo 0
else
    echo "WARNING: no Chromium on this machine: tests/app/test_browser.py is SKIPPED (install Debian's chromium to run it)" >&2
    echo 1
fi
