#!/bin/sh
# deb postinst / rpm %post. The group of the secrets file is set here as
# well as in the package: a package manager that unpacked before the group
# existed (or an admin's chown) must not leave it readable by others or
# unreadable by the service.
set -e
chown root:bext /etc/bext-scheduler/bext.env /etc/bext-scheduler/bext.config.toml
chmod 0640 /etc/bext-scheduler/bext.env /etc/bext-scheduler/bext.config.toml
install -d -m 0755 /etc/bext-scheduler/jobs
# Not enabled or started here: the config needs the operator's backend and
# secrets first. systemctl only where systemd runs (not in a container
# build, where the unit is used later).
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	# An upgrade restarts a running node (it drains within shutdown_grace).
	systemctl try-restart bext-scheduler.service >/dev/null 2>&1 || true
fi
