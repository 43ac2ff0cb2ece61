// Command lab is reserved for agentq's lab consumer, which is not built yet
// (see the README's status table). It exits with an error rather than
// pretending to run.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "lab: not built yet in this version of agentq; see the README's status table")
	os.Exit(2)
}
