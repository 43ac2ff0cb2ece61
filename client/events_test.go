package client_test

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/client"
	"github.com/agentq/agentq/schemas"
)

// inputTypes are the structs of every input event type.
var inputTypes = []client.Event{
	client.ToolExecuted{}, client.ToolRegistered{}, client.PromptCreated{}, client.PromptUsed{},
	client.FeedbackSubmitted{}, client.ExperimentRequested{}, client.ExperimentCancelled{},
	client.PromptActivated{}, client.ToolReleased{},
}

// TestEventStructsMatchSchemas: every input event type has a struct, and
// each struct has exactly the schema's fields, at every level, with the
// schema's required ones never omitted — so a field added to a schema
// fails here until the struct has it.
func TestEventStructsMatchSchemas(t *testing.T) {
	reg, err := schemas.Load()
	require.NoError(t, err)
	var have []string
	for _, ev := range inputTypes {
		have = append(have, ev.EventType())
	}
	for _, typ := range reg.Types() {
		if isInput(typ) {
			require.Contains(t, have, typ, "no struct for input type %s", typ)
		}
	}
	for _, ev := range inputTypes {
		t.Run(ev.EventType(), func(t *testing.T) {
			name := strings.TrimPrefix(ev.EventType(), "agentq.")
			b, err := os.ReadFile("../schemas/" + name + ".json")
			require.NoError(t, err)
			var sch map[string]any
			require.NoError(t, json.Unmarshal(b, &sch))
			defs, _ := sch["$defs"].(map[string]any)
			compareFields(t, name, reflect.TypeOf(ev), sch, defs)
		})
	}
}

// isInput reports whether typ is published by agents and operators, not
// by agentq: the types the README's input table lists.
func isInput(typ string) bool {
	switch strings.TrimSuffix(strings.TrimPrefix(typ, "agentq."), ".v1") {
	case "tool.registered", "tool.executed", "prompt.created", "prompt.used", "feedback.submitted",
		"experiment.requested", "experiment.cancelled", "prompt.activated", "tool.released":
		return true
	}
	return false
}

func compareFields(t *testing.T, path string, typ reflect.Type, sch, defs map[string]any) {
	t.Helper()
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		typ = typ.Elem()
	}
	if ref, ok := sch["$ref"].(string); ok {
		sch = defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
	}
	if items, ok := sch["items"].(map[string]any); ok {
		compareFields(t, path+"[]", typ, items, defs)
		return
	}
	props, ok := sch["properties"].(map[string]any)
	if !ok || typ.Kind() != reflect.Struct {
		return // a free-form object, a map, a scalar
	}
	var required []string
	if r, ok := sch["required"].([]any); ok {
		for _, x := range r {
			required = append(required, x.(string))
		}
	}
	fields := map[string]reflect.StructField{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		require.NotEmpty(t, name, "%s.%s has no JSON name", path, f.Name)
		fields[name] = f
		if slices.Contains(required, name) {
			require.NotContains(t, opts, "omitempty", "%s.%s is required by the schema", path, name)
		}
	}
	for name := range props {
		_, ok := fields[name]
		require.True(t, ok, "%s: schema field %s has no struct field", path, name)
	}
	for name, f := range fields {
		p, ok := props[name].(map[string]any)
		require.True(t, ok, "%s: struct field %s is not in the schema", path, name)
		compareFields(t, path+"."+name, f.Type, p, defs)
	}
}
