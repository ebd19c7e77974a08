package config_test

import (
	"fmt"

	"github.com/bext-dev/bext-scheduler/config"
)

func ExampleParse() {
	_, err := config.Parse([]byte(`
[locking]
backend = "redis"
[locking.redis]
url = "redis://app:hunter2%@redis:6379/0"

[[scheduled]]
id = "report"
cron = "0 3 * * 8"
jitter = "30 seconds"
command = ["/usr/local/bin/report"]
`), "bext.config.toml")
	fmt.Println(err)
	// Output:
	// bext.config.toml:5: locking.redis.url redis://redis:6379: not a valid URL
	// bext.config.toml:9: schedule "report": bad cron "0 3 * * 8": end of range (8) above maximum (6): 8
	// bext.config.toml:10: schedule "report": jitter: bad duration "30 seconds" (want a Go duration such as "30s", "2m" or "1h30m")
}

func ExampleRedactURL() {
	fmt.Println(config.RedactURL("postgres://app:hunter2@db:5432/bext?sslmode=require"))
	fmt.Println(config.RedactURL("host=db user=app password=hunter2 dbname=bext"))
	// Output:
	// postgres://db:5432
	// host=db
}
