// Package cli is the agentq operator command: the all-in-one dev process,
// migrations, publishing and tailing events, reading dead letters, replays
// and the load generator. cmd/agentq only hands it the arguments, the
// environment and the standard streams.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/config"
)

// Env is what a command may use from its process.
type Env struct {
	Args   []string // without the program name
	Getenv func(string) string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

type command struct {
	summary string
	run     func(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(context.Context, Env, config.Config, zerolog.Logger, []string) error) {
	commands[name] = command{summary, run}
}

// errUsage means the arguments were wrong; the command printed why.
var errUsage = errors.New("usage")

// Main runs the command named by e.Args[0] until it finishes or SIGINT or
// SIGTERM arrives, and returns the exit code.
func Main(e Env) int {
	tuneGC(e.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, e)
}

// Run runs the command named by e.Args[0] until it finishes or ctx ends, and
// returns the exit code.
func Run(ctx context.Context, e Env) int {
	if len(e.Args) == 0 || e.Args[0] == "-h" || e.Args[0] == "--help" || e.Args[0] == "help" {
		usage(e.Stderr)
		if len(e.Args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[e.Args[0]]
	if !ok {
		fmt.Fprintf(e.Stderr, "agentq: unknown command %q\n\n", e.Args[0])
		usage(e.Stderr)
		return 2
	}
	cfg, err := config.Load(e.Getenv)
	if err != nil {
		fmt.Fprintf(e.Stderr, "agentq: configuration: %v\n", err)
		return 2
	}
	log := app.NewLogger(cfg, e.Stderr)
	if err := cmd.run(ctx, e, cfg, log, e.Args[1:]); err != nil {
		switch {
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			return 2
		}
		fmt.Fprintf(e.Stderr, "agentq %s: %v\n", e.Args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: agentq <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nConfiguration comes from AGENTQ_* environment variables (docs/operations.md); run `agentq <command> -h` for flags.")
}

// parseError keeps -h a success and makes any other flag error a usage error
// (the flag package has printed why).
func parseError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return errUsage
}

// help is what `agentq <command> -h` says beyond the command's summary.
type help struct {
	synopsis string // after "usage: agentq <command>"
	text     string // a paragraph or two
}

var helps = map[string]help{}

// describe sets the synopsis and description that name's -h prints.
func describe(name, synopsis, text string) {
	helps[name] = help{synopsis, text}
}

func init() {
	describe("migrate", "", `Applies the SQL migrations built into the binary (migrations/*.sql; each runs
once, so running it again is harmless) to the database at AGENTQ_DATABASE_URL
and exits. Consumers and agentq dev also migrate when they start; in
production the compose file's migrate service runs this before them.`)
}

// flags returns the flag set of command name, whose -h prints the usage
// line, the description and the flags.
func flags(name string, e Env) *flag.FlagSet {
	fs := flag.NewFlagSet("agentq "+name, flag.ContinueOnError)
	fs.SetOutput(e.Stderr)
	fs.Usage = func() { printUsage(e.Stderr, name, fs, true) }
	return fs
}

// printUsage prints the usage line, the description if long, and the
// flags.
func printUsage(w io.Writer, name string, fs *flag.FlagSet, long bool) {
	h := helps[name]
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	synopsis := h.synopsis
	if synopsis == "" && hasFlags {
		synopsis = "[flags]"
	}
	fmt.Fprintf(w, "usage: %s\n", strings.TrimSpace("agentq "+name+" "+synopsis))
	if long {
		text := h.text
		if text == "" {
			text = commands[name].summary
		}
		fmt.Fprintf(w, "\n%s\n", text)
	}
	if hasFlags {
		fmt.Fprintln(w, "\nflags:")
		fs.PrintDefaults()
	}
}

// usageError reports what is wrong with the arguments on one line, then
// the command's usage, and returns errUsage.
func usageError(e Env, fs *flag.FlagSet, name, format string, args ...any) error {
	fmt.Fprintf(e.Stderr, "agentq %s: %s\n", name, fmt.Sprintf(format, args...))
	printUsage(e.Stderr, name, fs, false)
	fmt.Fprintf(e.Stderr, "\n`agentq %s -h` says more.\n", name)
	return errUsage
}
