// Command agentq is the operator CLI: `agentq dev` runs everything in one
// process; see `agentq help` for the rest.
package main

import (
	"os"

	"github.com/agentq/agentq/internal/cli"
)

func main() {
	os.Exit(cli.Main(cli.Env{Args: os.Args[1:], Getenv: os.Getenv, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}))
}
