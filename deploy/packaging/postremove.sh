#!/bin/sh
# deb postrm / rpm %postun. purge (deb only) removes what the package and
# the service created: /etc/bext-scheduler (dpkg has removed its conffiles;
# jobs/ and anything added there go too) and /var/lib/bext, the jobs'
# working directory. The bext user and group are kept, as Debian does for
# system users: files elsewhere may still carry their ids, which must not
# pass to a later user. Remove them with `userdel bext` if wanted.
set -e
if [ "$1" = purge ]; then
	rm -rf /etc/bext-scheduler /var/lib/bext
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
