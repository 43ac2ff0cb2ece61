package indexer

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/registry"
)

// Events that write the same rows share a group, in stream order; every
// valid event is in exactly one group.
func TestPartition(t *testing.T) {
	mk := func(kind opKind, tenant, key string) op {
		o := op{kind: kind, d: &bus.Delivery{Tenant: tenant}}
		switch kind {
		case opPrompt:
			o.prompt = library.Prompt{Tenant: tenant, ID: key}
		case opLabel:
			o.label = labelMove{promptID: key, label: "production", version: 1}
		case opTool:
			o.tool = registry.Tool{Tenant: tenant, Name: key}
		case opHealth:
			o.health = healthRow{toolName: key}
		case opQuality:
			o.quality = qualityRow{target: "tool", ref: key}
		}
		return o
	}
	// Same-key families: a create and a label move of one prompt id; a
	// registration and a health change of one tool; one quality figure.
	var ops []op
	for i := range 60 {
		tenant := []string{"acme", "globex"}[i%2]
		key := fmt.Sprintf("k%d", i%7)
		kind := []opKind{opPrompt, opLabel, opTool, opHealth, opQuality}[i%5]
		ops = append(ops, mk(kind, tenant, key))
	}
	family := func(o *op) string {
		switch o.kind {
		case opPrompt:
			return "prompt/" + o.d.Tenant + "/" + o.prompt.ID
		case opLabel:
			return "prompt/" + o.d.Tenant + "/" + o.label.promptID
		case opTool:
			return "tool/" + o.d.Tenant + "/" + o.tool.Name
		case opHealth:
			return "tool/" + o.d.Tenant + "/" + o.health.toolName
		}
		return "quality/" + o.d.Tenant + "/" + o.quality.ref
	}
	var valid []int
	for i := range ops {
		if i%11 != 3 { // some events failed to decode: not in valid
			valid = append(valid, i)
		}
	}
	tests := []struct {
		name   string
		n      int
		groups int // exactly, or 0 for "more than one"
	}{
		{"one writer", 1, 1},
		{"two writers", 2, 2},
		{"four writers", 4, 0},
		{"more writers than keys", 200, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			groups := partition(ops, valid, tc.n)
			if tc.groups > 0 {
				require.Len(t, groups, tc.groups)
			} else {
				require.Greater(t, len(groups), 1)
				require.LessOrEqual(t, len(groups), tc.n)
			}
			var all []int
			home := map[string]int{}
			for g, idx := range groups {
				require.NotEmpty(t, idx, "no empty group")
				require.True(t, slices.IsSorted(idx), "group %d in stream order: %v", g, idx)
				for _, i := range idx {
					f := family(&ops[i])
					if h, ok := home[f]; ok {
						require.Equal(t, h, g, "%s split across groups", f)
					}
					home[f] = g
				}
				all = append(all, idx...)
			}
			slices.Sort(all)
			require.Equal(t, valid, all, "every valid event exactly once")
		})
	}
	require.Equal(t, [][]int{{5}}, partition(ops, []int{5}, 4), "a single event is one group")
}
