package lab

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Trials returns the trials stored so far for experiment id of tenant
// (consumer is the lab's name, "lab" by default), ordered by version,
// query and repetition: what `agentq experiment trials` shows.
func Trials(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, consumer, tenant, id string) ([]Trial, error) {
	rows, err := db.Query(ctx, `
		SELECT step, output FROM job_steps
		WHERE tenant_id = $1 AND consumer = $2 AND job_id = $3 AND step LIKE 'trial/%'`, tenant, consumer, id)
	if err != nil {
		return nil, fmt.Errorf("trials of %s: %w", id, err)
	}
	steps := map[string]json.RawMessage{}
	var step string
	var out []byte
	if _, err := pgx.ForEachRow(rows, []any{&step, &out}, func() error {
		steps[step] = json.RawMessage(out)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("trials of %s: %w", id, err)
	}
	return trialsOf(steps), nil
}
