package health

import "github.com/agentq/agentq/internal/bus"

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
