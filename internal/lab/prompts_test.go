package lab_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/outbox"
	"github.com/agentq/agentq/internal/testenv"
)

// The prompt read model follows the indexer's revisions: a create revised
// to another version moves there, one revised to indexer.rejected is no
// version, a version's content and metadata are those of the create that
// made it (not of one answered unchanged), and the labels of a superseded
// result no longer count; whatever order the results are applied in.
func TestPromptReadModelFollowsRevisions(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	l, err := lab.New(pool, outbox.Discard, lab.Options{}, testenv.Logger(t))
	require.NoError(t, err)
	tools := []any{toolDef("lookup")}

	history := func(tenant string) []*bus.Delivery {
		var ds []*bus.Delivery
		add := func(ev event.Event) event.Event {
			ds = append(ds, &bus.Delivery{Event: ev, Tenant: tenant, StreamSeq: uint64(len(ds) + 1), Time: time.Now()})
			return ev
		}
		created := func(content string, metadata map[string]any) event.Event {
			data := map[string]any{"id": "p", "type": "system", "name": "P", "content": content}
			if metadata != nil {
				data["metadata"] = metadata
			}
			ev, err := bus.NewEvent(typeCreated, tenant, "test", data)
			require.NoError(t, err)
			return add(ev)
		}
		result := func(typ string, cause event.Event, data map[string]any) {
			ev, err := bus.NewResult("indexer", typ, cause, data)
			require.NoError(t, err)
			ev.SetID(fmt.Sprintf("%s-%d", ev.ID(), len(ds))) // a revision has an id of its own
			add(ev)
		}
		indexed := func(cause event.Event, version int, more map[string]any) {
			data := map[string]any{"prompt_id": "p", "version": version, "content_hash": cause.ID()}
			for k, v := range more {
				data[k] = v
			}
			result(typeIndexed, cause, data)
		}
		rejected := func(cause event.Event, typ string) {
			result(bus.Type("indexer", "rejected"), cause, map[string]any{"reason_code": "version_conflict", "reason": "taken",
				"event_type": typ, "event_id": cause.ID(), "revised": true})
		}
		c1 := created("one", nil)
		indexed(c1, 1, map[string]any{"labels": []string{"production"}})
		c2 := created("two", nil)
		indexed(c2, 2, nil)
		// A create earlier in the stream arrives late and takes version 1:
		// the two after it move up.
		c0 := created("zero", nil)
		indexed(c0, 1, nil)
		indexed(c1, 2, map[string]any{"revised": true, "labels": []string{"production"}})
		indexed(c2, 3, map[string]any{"revised": true})
		// The same content again, with tools: unchanged, and no metadata of
		// the version's.
		c3 := created("two", map[string]any{"tools": tools})
		indexed(c3, 3, map[string]any{"outcome": "unchanged"})
		c4 := created("four", nil)
		indexed(c4, 4, map[string]any{"labels": []string{"staging"}})
		rejected(c4, typeCreated)
		rejected(c0, bus.Type("tool", "registered")) // a tool's: not the lab's concern
		return ds
	}
	want := labStateOf{
		Versions: []labVersion{
			{Prompt: "p", Version: 1, Content: "zero"},
			{Prompt: "p", Version: 2, Content: "one"},
			{Prompt: "p", Version: 3, Content: "two"},
		},
		Labels:      []labLabel{{Prompt: "p", Label: "production", Version: 2}},
		Experiments: []labExperiment{},
	}
	for name, order := range map[string]func([]*bus.Delivery) []*bus.Delivery{
		"stream order": func(ds []*bus.Delivery) []*bus.Delivery { return ds },
		"results backwards, after the creates": func(ds []*bus.Delivery) []*bus.Delivery {
			var creates, results []*bus.Delivery
			for _, d := range ds {
				if d.Event.Type() == typeCreated {
					creates = append(creates, d)
				} else {
					results = append([]*bus.Delivery{d}, results...)
				}
			}
			return append(creates, results...)
		},
	} {
		t.Run(name, func(t *testing.T) {
			tenant := testenv.Tenant(t)
			ds := history(tenant)
			for _, d := range order(ds) {
				require.NoError(t, l.Handle(ctx, d))
			}
			require.Equal(t, want, labState(t, pool, tenant))
			var tool int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE consumer = 'lab' AND tenant_id = $1 AND event_id = $2`,
				tenant, ds[len(ds)-1].Event.ID()).Scan(&tool))
			require.Zero(t, tool, "a tool's rejection is not applied")
			var hashes []string
			rows, err := pool.Query(ctx, `SELECT content_hash FROM lab_prompt_versions WHERE tenant_id = $1 ORDER BY version, NOT created`, tenant)
			require.NoError(t, err)
			for rows.Next() {
				var h string
				require.NoError(t, rows.Scan(&h))
				hashes = append(hashes, h)
			}
			require.NoError(t, rows.Err())
			require.Equal(t, []string{ds[4].Event.ID(), ds[0].Event.ID(), ds[2].Event.ID(), ds[8].Event.ID()}, hashes,
				"each version's hash is its newest result's, the unchanged create's too")
		})
	}
}
