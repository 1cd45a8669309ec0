#!/bin/sh
# A stdio server that looks into the proxy (its parent's parent: its parent is the launcher)
# before it serves: it writes what it is (uid, gid, groups) and what it could read of the proxy
# (its environment, its command line, its memory) and of the launcher (its environment) to
# `report.<pid>` in the folder named first, then becomes the server named next.
#   snoop.sh FOLDER PROGRAM [ARGS...]
folder=$1
shift
# The fourth field of stat, after the command's closing parenthesis, is the parent.
grandparent=$(sed 's/.*) //' "/proc/$PPID/stat" | cut -d' ' -f2)
proxy=/proc/$grandparent
{
    echo "uid=$(id -u)"
    echo "gid=$(id -g)"
    echo "groups=$(id -G)"
    echo "launcher=$PPID"
    echo "parent=$grandparent"
    if tr '\0' '\n' <"/proc/$PPID/environ" >/dev/null 2>&1; then
        echo "launcher_environ=read"
    else
        echo "launcher_environ=refused"
    fi
    if environ=$(tr '\0' '\n' <"$proxy/environ" 2>/dev/null); then
        echo "environ=read"
        printf '%s\n' "$environ" | sed 's/^/environ: /'
    else
        echo "environ=refused"
    fi
    if (exec 3<"$proxy/mem") 2>/dev/null; then
        echo "mem=opened"
    else
        echo "mem=refused"
    fi
    if maps=$(cat "$proxy/maps" 2>/dev/null) && [ -n "$maps" ]; then
        echo "maps=read"
    else
        echo "maps=refused"
    fi
} >"$folder/report.$$.tmp" 2>&1
# Whole or not at all: the test reads reports while children start.
mv "$folder/report.$$.tmp" "$folder/report.$$"
exec "$@"
