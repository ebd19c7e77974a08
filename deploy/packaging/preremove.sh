#!/bin/sh
# deb prerm / rpm %preun: stop and disable the service on removal, not on
# upgrade (deb: "upgrade"; rpm: $1 is 1 while a newer version stays).
set -e
case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl disable --now bext-scheduler.service >/dev/null 2>&1 || true
	fi
	;;
esac
