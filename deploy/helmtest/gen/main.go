// Command gen writes deploy/kubernetes/bext-scheduler.yaml from the chart
// (`make k8s-manifests`); TestPlainManifestsCurrent fails when it is stale.
package main

import (
	"fmt"
	"os"

	"github.com/bext-dev/bext-scheduler/deploy/helmtest"
)

func main() {
	if err := helmtest.WritePlainManifests(); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", helmtest.PlainManifestsFile)
}
