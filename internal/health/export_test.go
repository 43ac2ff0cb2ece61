package health

import (
	"encoding/json"

	"github.com/agentq/agentq/internal/bus"
)

// Fold is the reference: deliveries applied one by one in the order given
// (stream order) to empty state, with no database, runner or ack floor.
// It returns every tool's state by tenant and tool, and the transitions
// and refusals as the results they publish (type, tool, version, state),
// in order.
func Fold(ds []*bus.Delivery, p Params) (map[string]map[string]Tool, []string) {
	tenants := map[string]*Tenant{}
	var results []string
	for _, d := range ds {
		fs, err := facts(d)
		if err != nil {
			continue // not an input (a result read with the history), or dead-lettered
		}
		tn := tenants[d.Tenant]
		if tn == nil {
			tn = NewTenant()
			tenants[d.Tenant] = tn
		}
		for _, f := range fs {
			trs, rejected := apply(tn, f, p)
			if rejected != nil {
				results = append(results, TypeRejected+" "+f.Tool+" "+f.EventID)
			}
			for _, tr := range trs {
				if typ := resultType(tr); typ != "" {
					results = append(results, resultKey(typ, tr.Tool, tr.Version, string(tr.To)))
				}
			}
		}
	}
	out := map[string]map[string]Tool{}
	for name, tn := range tenants {
		out[name] = map[string]Tool{}
		for tool, t := range tn.Tools {
			out[name][tool] = *t
		}
	}
	return out, results
}

func resultKey(typ, tool string, version int64, state string) string {
	return typ + " " + tool + " v" + itoa(version) + " " + state
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for v > 0 {
		b = append([]byte{byte('0' + v%10)}, b...)
		v /= 10
	}
	return string(b)
}

// ResultKey renders a published result as Fold renders it.
func ResultKey(typ, tool string, version int64, state, causeID string) string {
	if typ == TypeRejected {
		return TypeRejected + " " + tool + " " + causeID
	}
	return resultKey(typ, tool, version, state)
}

// Expected is the results a history calls for, as the conformance suite
// compares them: one per announced transition (key tool@version) and one
// per refused release (key rejected:<event id>), with the ids the
// degrader derives and the data it publishes.
func Expected(ds []*bus.Delivery, p Params, consumer string) []ExpectedResult {
	tenants := map[string]*Tenant{}
	var out []ExpectedResult
	for _, d := range ds {
		fs, err := facts(d)
		if err != nil {
			continue
		}
		tn := tenants[d.Tenant]
		if tn == nil {
			tn = NewTenant()
			tenants[d.Tenant] = tn
		}
		for _, f := range fs {
			trs, rejected := apply(tn, f, p)
			if rejected != nil {
				out = append(out, ExpectedResult{Key: "rejected:" + f.EventID, Type: TypeRejected,
					ID:   bus.DeriveID(consumer, d.Tenant, TypeRejected, "event:"+f.EventID),
					Data: asMap(map[string]any{"reason_code": "not_quarantined", "reason": rejected.Error(), "event_type": f.Type, "event_id": f.EventID})})
			}
			for _, tr := range trs {
				typ := resultType(tr)
				if typ == "" {
					continue
				}
				out = append(out, ExpectedResult{Key: tr.Tool + "@" + itoa(tr.Version), Type: typ,
					ID:   bus.DeriveID(consumer, d.Tenant, typ, "state:"+tr.Tool+"@"+itoa(tr.Version)),
					Data: asMap(dataOf(tr))})
			}
		}
	}
	return out
}

// ExpectedResult is one result Expected calls for.
type ExpectedResult struct {
	Key, ID, Type string
	Data          map[string]any
}

// asMap renders v as a result's data reads back: through JSON.
func asMap(v any) map[string]any {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		panic(err)
	}
	return m
}
