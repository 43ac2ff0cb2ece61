package cli

import (
	"context"
	"os"
	"runtime/pprof"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bench"
	"github.com/agentq/agentq/internal/config"
)

func init() {
	describe("bench ingest", "[--events N] [--batch N] [--concurrency N] [--rounds N] [--json] [--cpuprofile FILE]",
		`Measures agentq ingest on an embedded NATS server (no database: nothing
consumes the events), in one run, each round doing four phases back to
back on an emptied stream AGENTQ with the same number of tool.executed
events of realistic size:

  raw: JetStream async publishing of messages encoded before the clock
  starts, a batch at a time with the batch's acks awaited (the anchor);
  agentq publish: what the command does per event (validate against the
  schema, encode, publish, wait for the ack), one event at a time;
  validated async: the same validation and encoding, a batch at a time;
  ingest: POST of each batch as application/cloudevents-batch+json to the
  endpoint over loopback, bodies rendered before the clock starts, each
  answered 202 after JetStream's acks.

--concurrency senders run in every phase. Rates are medians over --rounds;
ingest/raw is printed per round too, because a shared machine is noisy.`)
}

func runBenchIngest(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	fs := flags("bench ingest", e)
	var o bench.IngestOptions
	fs.IntVar(&o.Events, "events", 20000, "events per phase and round")
	fs.IntVar(&o.Batch, "batch", 100, "events per HTTP request, and per acknowledged batch of the anchors")
	fs.IntVar(&o.Concurrency, "concurrency", 1, "senders at once in every phase")
	fs.IntVar(&o.Rounds, "rounds", 5, "rounds; medians are reported")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if o.Events < 1 || o.Batch < 1 || o.Batch > 10000 || o.Concurrency < 1 || o.Concurrency > 256 || o.Rounds < 1 {
		return usageError(e, fs, "bench ingest", "--events and --rounds must be positive, --batch 1..10000, --concurrency 1..256")
	}
	res, err := bench.Ingest(ctx, cfg, o, log)
	if err != nil {
		return err
	}
	return printBench(e, *asJSON, res)
}
