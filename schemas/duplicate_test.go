package schemas_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/schemas"
)

// Data that names a member twice is refused with the place, at any depth,
// whichever copy the schema would have liked; consumers read by exact
// names and could not know which copy was checked.
func TestValidateRefusesANameGivenTwice(t *testing.T) {
	reg, err := schemas.Load()
	require.NoError(t, err)
	tests := []struct {
		name, data, want string
	}{
		{"top level", `{"tool_name":"t","success":true,"success":false}`, `/: member "success" given twice`},
		{"both copies valid and equal", `{"tool_name":"t","tool_name":"t","success":true}`, `/: member "tool_name" given twice`},
		{"in a free-form object", `{"tool_name":"t","success":true,"input":{"q":1,"q":2}}`, `/input: member "q" given twice`},
		{"escaped spelling of the same name", `{"tool_name":"t","success":true,"succ\u0065ss":false}`, `/: member "success" given twice`},
		{"case variants are different names", `{"tool_name":"t","success":true,"SUCCESS":false}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := reg.Validate("agentq.tool.executed.v1", []byte(tc.data))
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			var verr *schemas.ValidationError
			require.True(t, errors.As(err, &verr), "%v", err)
			require.Equal(t, []string{tc.want}, verr.Problems)
		})
	}
}
