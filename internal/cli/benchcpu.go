package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bench"
	"github.com/agentq/agentq/internal/config"
)

func init() {
	register("benchcpu", "CPU per event of the scorer draining a backlog, with a CPU profile of that alone", runBenchCPU)
}

func runBenchCPU(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	fs := flags("benchcpu", e)
	n := fs.Int("events", 20000, "events in the backlog")
	warm := fs.Int("warmup", 2000, "events drained first, unmeasured, to warm connections and caches")
	batch := fs.Int("batch", cfg.Runner("scorer").BatchSize, "scorer batch size (events per transaction)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the drain alone to this file (go tool pprof)")
	memProfile := fs.String("memprofile", "", "write allocation profiles of the drain alone to this file and this file.base (go tool pprof -sample_index=alloc_space -base)")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	if *n < 1 || *warm < 0 {
		return fmt.Errorf("--events must be positive and --warmup not negative")
	}
	cfg = withScorerBatch(cfg, *batch)
	var prof *os.File
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		prof = f
	}
	var memBase, memProf *os.File
	if *memProfile != "" {
		var err error
		if memBase, err = os.Create(*memProfile + ".base"); err != nil {
			return err
		}
		defer memBase.Close()
		if memProf, err = os.Create(*memProfile); err != nil {
			return err
		}
		defer memProf.Close()
	}
	res, err := bench.CPU(ctx, cfg, *n, *warm, prof, memBase, memProf, log)
	if err != nil {
		return err
	}
	perEvent := func(s float64) string {
		if s < 0 {
			return "not measured"
		}
		return fmt.Sprintf("%.1f µs per event", 1e6*s/float64(res.Events))
	}
	fmt.Fprintf(e.Stdout, `agentq benchcpu: the scorer drained %d events in %.2f s (%.0f events/s), batch %d, database: %s
  CPU of this process (scorer + embedded NATS server)   %s
  CPU of the database's Postgres backends               %s
  heap allocations of this process                      %.0f objects, %.1f kB per event
`, res.Events, res.Seconds, float64(res.Events)/res.Seconds, *batch, res.Database, perEvent(res.ProcessCPU), perEvent(res.PostgresCPU),
		float64(res.Allocs)/float64(res.Events), float64(res.AllocBytes)/1e3/float64(res.Events))
	if *cpuProfile != "" {
		fmt.Fprintf(e.Stdout, "  CPU profile of the drain: %s (go tool pprof -top -cum <binary> %s)\n", *cpuProfile, *cpuProfile)
	}
	if *memProfile != "" {
		fmt.Fprintf(e.Stdout, "  allocation profile of the drain: %s (go tool pprof -sample_index=alloc_space -base %s.base <binary> %s)\n", *memProfile, *memProfile, *memProfile)
	}
	return nil
}

// withScorerBatch returns cfg with the scorer's batch size set to batch,
// whatever the environment said, and the process-wide one too: the bench's
// Postgres ceiling commits batches of the same size.
func withScorerBatch(cfg config.Config, batch int) config.Config {
	cfg.BatchSize = batch
	consumers := make(map[string]config.ConsumerSettings, len(cfg.Consumers))
	for name, s := range cfg.Consumers {
		if name == "scorer" {
			s.BatchSize = 0
		}
		consumers[name] = s
	}
	cfg.Consumers = consumers
	return cfg
}
