package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/config"
)

// CPUResult is what one benchcpu run measured over the scorer's drain
// of a backlog, and nothing else: publishing and start-up are outside it.
type CPUResult struct {
	Events  int
	Seconds float64 // first fetch to last commit
	// ProcessCPU is this process's CPU (the scorer and the embedded NATS
	// server it consumes from), in seconds; negative when not measured.
	ProcessCPU float64
	// PostgresCPU is the CPU of the Postgres backends connected to the
	// database (its own processes on this machine), in seconds; negative
	// when not measured (Postgres elsewhere, or no /proc).
	PostgresCPU float64
	// Allocs and AllocBytes are the heap allocations of this process
	// (objects and bytes) over the drain: what the garbage collector pays
	// for.
	Allocs, AllocBytes uint64
	Database           string
}

// CPU publishes a backlog of n tool.executed events (the bench's),
// then measures the scorer draining it until every event is committed:
// wall time, this process's CPU and the Postgres backends' CPU, and, when
// prof is not nil, a CPU profile of that window alone.
//
// When memProf is not nil, it receives the allocation profile at the end of
// the drain and memBase the one at its start: go tool pprof -base memBase
// memProf shows the drain's allocations alone.
func CPU(ctx context.Context, cfg config.Config, n, warm int, prof, memBase, memProf *os.File, log zerolog.Logger) (CPUResult, error) {
	res := CPUResult{Events: n, ProcessCPU: -1, PostgresCPU: -1, Database: "AGENTQ_DATABASE_URL"}
	cfg, pglite, stop, err := embedded(ctx, cfg)
	defer stop()
	if err != nil {
		return res, err
	}
	if pglite {
		res.Database = "PGlite dev database (WASM; measure on native Postgres for production figures)"
	}
	d, err := app.Start(ctx, cfg, "bench", log.Level(zerolog.WarnLevel))
	if err != nil {
		return res, err
	}
	defer d.Close(context.WithoutCancel(ctx))

	drain := func(events int, measure bool) error {
		tenant := fmt.Sprintf("benchcpu-%x", rand.Uint32())
		for _, ev := range benchEvents(events, tenant) {
			if _, err := d.Publisher.PublishAsync(ev); err != nil {
				return err
			}
		}
		if err := d.Publisher.Flush(ctx); err != nil {
			return err
		}
		var pg0 map[int]float64
		var self0 float64
		var mem0 runtime.MemStats
		if measure {
			if memBase != nil {
				if err := pprof.Lookup("allocs").WriteTo(memBase, 0); err != nil {
					return err
				}
			}
			runtime.ReadMemStats(&mem0)
			pg0, self0 = postgresCPU(ctx, d), processCPU(os.Getpid())
			if prof != nil {
				if err := pprof.StartCPUProfile(prof); err != nil {
					return err
				}
			}
		}
		start := time.Now()
		stop := runScorer(ctx, d)
		defer stop()
		err := waitCommitted(ctx, d, tenant, int64(events))
		if !measure {
			return err
		}
		res.Seconds = time.Since(start).Seconds()
		if prof != nil {
			pprof.StopCPUProfile()
		}
		if self1 := processCPU(os.Getpid()); self0 >= 0 && self1 >= 0 {
			res.ProcessCPU = self1 - self0
		}
		var mem1 runtime.MemStats
		runtime.ReadMemStats(&mem1)
		res.Allocs, res.AllocBytes = mem1.Mallocs-mem0.Mallocs, mem1.TotalAlloc-mem0.TotalAlloc
		if memProf != nil {
			if err := pprof.Lookup("allocs").WriteTo(memProf, 0); err != nil {
				return err
			}
		}
		if pg1 := postgresCPU(ctx, d); pg0 != nil && pg1 != nil {
			// A backend that connected during the drain spent all its CPU in it.
			res.PostgresCPU = 0
			for pid, c := range pg1 {
				res.PostgresCPU += c - pg0[pid]
			}
		}
		return err
	}
	if warm > 0 {
		if err := drain(warm, false); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
	}
	return res, drain(n, true)
}

// postgresCPU returns the CPU seconds so far of each Postgres backend
// connected to the current database, read from /proc; nil when they
// cannot be read (Postgres on another machine, or no /proc).
func postgresCPU(ctx context.Context, d *app.Deps) map[int]float64 {
	rows, err := d.Pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return nil
	}
	defer rows.Close()
	out := map[int]float64{}
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) != nil {
			return nil
		}
		c := processCPU(pid)
		if c < 0 {
			return nil
		}
		out[pid] = c
	}
	if rows.Err() != nil || len(out) == 0 {
		return nil
	}
	return out
}

// processCPU returns the user+system CPU seconds of a process so far, from
// /proc/<pid>/stat (in clock ticks of 1/100 s, Linux's USER_HZ), or -1.
func processCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// The command name may hold spaces; the fields after it do not.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseFloat(f[11], 64) // field 14 of stat
	stime, err2 := strconv.ParseFloat(f[12], 64) // field 15
	if err1 != nil || err2 != nil {
		return -1
	}
	return (utime + stime) / 100
}
