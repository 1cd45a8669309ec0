#!/usr/bin/env bash
# Packs what the many-core benchmark runs besides the release binaries into target/bundle, for a
# machine with neither a toolchain nor Debian's nginx and redis-server: those two programs, each
# behind a wrapper that points it at the libraries it was built with (bundled too, all but glibc's
# own: the machine's glibc must be 2.34 or newer, as for the proxy). On that machine:
#
#   PATH=$PWD/target/bundle/bin:$PATH python3 bench/run.py --no-build --without-node \
#       --without-crates --sessions 1,16,64,256 --sections tables,balanced --output FILE
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=target/bundle
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"
for program in nginx redis-server; do
  path=$(command -v "$program" || true)
  [ -n "$path" ] || path=/usr/sbin/$program
  [ -x "$path" ] || { echo "$program is not installed (apt-get install nginx redis-server)" >&2; exit 1; }
  path=$(readlink -f "$path")
  cp "$path" "$BUNDLE/bin/$program.real"
  ldd "$path" | awk '/=> \// { print $3 }' | while read -r library; do
    case "$(basename "$library")" in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;
      *) cp -L "$library" "$BUNDLE/lib/" ;;
    esac
  done
  cat > "$BUNDLE/bin/$program" <<WRAP
#!/bin/sh
here=\$(dirname "\$(readlink -f "\$0")")
LD_LIBRARY_PATH="\$here/../lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$here/$program.real" "\$@"
WRAP
  chmod +x "$BUNDLE/bin/$program"
done
du -sh "$BUNDLE" >&2
