#!/bin/sh
# deb preinst / rpm %pre: the service user exists before the files are
# unpacked, so the env file and config can be group bext from the start.
set -e
if ! getent group bext >/dev/null; then
	groupadd --system bext
fi
if ! getent passwd bext >/dev/null; then
	useradd --system --gid bext --home-dir /var/lib/bext --no-create-home \
		--shell /usr/sbin/nologin --comment "bext-scheduler" bext
fi
