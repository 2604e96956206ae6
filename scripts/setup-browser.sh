#!/usr/bin/env bash
# What the browser tests (tests/explainer/web/test_browser.py) need from the system: Debian's
# Chromium and the WenQuanYi Micro Hei font. Installs only what is missing, so running it
# again costs nothing; `apt-get update` runs only when something is to be installed.
# The Python side (playwright, driving this Chromium through executable_path) comes with
# the package's test extra; `playwright install` is never needed.
set -euo pipefail

packages=(chromium fonts-wqy-microhei)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "setup-browser: ${missing[*]} missing; run as root or install sudo" >&2
    exit 1
  fi
  sudo="sudo"
fi
echo "setup-browser: installing ${missing[*]}" >&2
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
