package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/robfig/cron/v3"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/outbox"
)

// Scheduled runs from feedback (AGENTQ_LAB_SCHEDULE). At each slot of the
// cron schedule, every lab copy publishes, for each prompt it covers that
// has negative feedback no incremental run has looked at, an incremental
// experiment.requested whose event id and experiment id derive from the
// prompt and the slot: the copies publish the same event, JetStream's
// duplicate window and the lab's inbox keep one, and its experiment id
// names one job. A slot therefore runs once however many copies there are,
// and needs no leader. The request is then handled like any other: too
// little feedback is refused with lab.rejected.

// startSchedule runs the schedule until ctx ends; the channel is closed
// when it has stopped (at once when there is none).
func (l *Lab) startSchedule(ctx context.Context) <-chan error {
	done := make(chan error, 1)
	spec := l.opts.Lab.Schedule
	if spec == "" {
		close(done)
		return done
	}
	sched, err := config.LabSchedule(spec)
	if err != nil {
		done <- fmt.Errorf("lab: AGENTQ_LAB_SCHEDULE: %w", err)
		close(done)
		return done
	}
	prompts := config.LabSchedulePrompts(l.opts.Lab.SchedulePrompts)
	l.log.Info().Str("schedule", spec).Strs("prompts", prompts).Msg("lab: scheduled runs from feedback")
	go func() {
		defer close(done)
		l.schedule(ctx, sched, prompts)
	}()
	return done
}

// schedule waits for each slot and starts its runs.
func (l *Lab) schedule(ctx context.Context, sched cron.Schedule, prompts []string) {
	for {
		slot := sched.Next(time.Now())
		if slot.IsZero() {
			return // a schedule with no more times
		}
		t := time.NewTimer(time.Until(slot))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if l.llm == nil {
			l.log.Warn().Time("slot", slot).Msg("lab: scheduled runs skipped: no model configured")
			continue
		}
		n, err := l.scheduleSlot(ctx, slot.UTC(), prompts)
		if err != nil && ctx.Err() == nil {
			l.log.Warn().Err(err).Time("slot", slot).Msg("lab: scheduled runs not started; the next slot tries again")
			continue
		}
		l.log.Info().Time("slot", slot).Int("requests", n).Msg("lab: scheduled runs from feedback requested")
	}
}

// scheduleSlot publishes the slot's requests and returns how many.
func (l *Lab) scheduleSlot(ctx context.Context, slot time.Time, prompts []string) (int, error) {
	rows, err := l.pool.Query(ctx, `
		SELECT DISTINCT tenant_id, prompt_id FROM lab_prompt_versions
		WHERE cardinality($1::text[]) = 0 OR prompt_id = ANY($1)
		ORDER BY tenant_id, prompt_id`, prompts)
	if err != nil {
		return 0, fmt.Errorf("prompts to schedule: %w", database.Classify(err))
	}
	type target struct{ tenant, prompt string }
	var targets []target
	var t target
	if _, err := pgx.ForEachRow(rows, []any{&t.tenant, &t.prompt}, func() error {
		targets = append(targets, t)
		return nil
	}); err != nil {
		return 0, fmt.Errorf("prompts to schedule: %w", database.Classify(err))
	}
	var evs []event.Event
	for _, t := range targets {
		fresh, _, err := negatives(ctx, l.pool, t.tenant, t.prompt, feedbackWindow{fresh: true})
		if err != nil {
			return 0, database.Classify(err)
		}
		if len(fresh) == 0 {
			continue // nothing new to look at
		}
		ev, err := l.scheduledRequest(t.tenant, t.prompt, slot)
		if err != nil {
			return 0, err
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 {
		return 0, nil
	}
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return 0, database.Classify(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := outbox.Add(ctx, tx, evs...); err != nil {
		return 0, database.Classify(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, database.Classify(err)
	}
	if err := l.out.Send(ctx, evs); err != nil {
		l.log.Warn().Err(err).Msg("lab: scheduled requests left to the outbox relay")
	}
	return len(evs), nil
}

// scheduledRequest is the slot's incremental request for a prompt; its
// ids derive from the prompt and the slot alone.
func (l *Lab) scheduledRequest(tenant, promptID string, slot time.Time) (event.Event, error) {
	stamp := slot.UTC().Format("20060102T150405Z")
	id := "auto-" + stamp + "-" + promptID
	if !experimentIDRE.MatchString(id) {
		sum := sha256.Sum256([]byte(promptID))
		id = "auto-" + stamp + "-" + hex.EncodeToString(sum[:8])
	}
	data := map[string]any{
		"prompt_id": promptID, "experiment_id": id,
		"name": "scheduled run from feedback, " + slot.UTC().Format(time.RFC3339),
		"auto": map[string]any{"incremental": true},
	}
	ev, err := bus.NewEvent(TypeRequested, tenant, "agentq/"+l.opts.Consumer, data)
	if err != nil {
		return ev, bus.Permanent(err)
	}
	ev.SetID(bus.DeriveID(l.opts.Consumer, tenant, TypeRequested, "schedule:"+promptID+"@"+stamp))
	ev.SetTime(slot)
	return ev, nil
}
