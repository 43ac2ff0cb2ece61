package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/agentq/agentq/client"
)

// The examples run against a local agentq (see TestMain): natsURL is its
// NATS server, and tenant has the prompts and tools of the repository's
// examples/ directory (`agentq prompt seed examples/prompts.yaml`,
// `agentq tool register examples/tools.yaml`).

func Example() {
	ctx := context.Background()
	c, err := client.Connect(ctx, client.Config{URL: natsURL, Tenant: tenant, Source: "agent/sql-helper"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// The prompt for this step, from the cache after the first call.
	got, err := c.GetPrompt(ctx, "sql-repair", client.WithParams(map[string]any{
		"Query": "select * from orders where",
		"Error": "syntax error at end of input",
	}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s version %d\n", got.Prompt.ID, got.Prompt.Version)

	// ... the agent calls its model with got.Rendered, and a tool ...

	// Report what happened: the scorer, the rater and the degrader take it
	// from here.
	if _, err := c.Publish(ctx, client.PromptUsed{PromptHash: got.Prompt.ContentHash, Success: true, LatencyMS: 840}); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Publish(ctx, client.ToolExecuted{ToolName: "sql_query", Success: false, ErrorClass: "syntax_error", LatencyMS: 12}); err != nil {
		log.Fatal(err)
	}
	// Before exiting: wait for JetStream's acks.
	if err := c.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("published")
	// Output:
	// sql-repair version 1
	// published
}

func ExampleClient_GetPrompt() {
	ctx := context.Background()
	c, err := client.Connect(ctx, client.Config{URL: natsURL, Tenant: tenant})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for range 2 {
		got, err := c.GetPrompt(ctx, "support-answer", client.WithParams(map[string]any{"Product": "Acme Cloud"}))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("version %d, from the cache: %v\n", got.Prompt.Version, got.Cached)
		fmt.Println(got.Rendered[:strings.IndexByte(got.Rendered, '\n')])
	}

	// A prompt that does not exist.
	_, err = c.GetPrompt(ctx, "no-such-prompt")
	fmt.Println(errors.Is(err, client.ErrNotFound))
	// Output:
	// version 1, from the cache: false
	// You are a customer support agent for Acme Cloud.
	// version 1, from the cache: true
	// You are a customer support agent for Acme Cloud.
	// true
}

func ExampleClient_SearchTools() {
	ctx := context.Background()
	c, err := client.Connect(ctx, client.Config{URL: natsURL, Tenant: tenant})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	res, err := c.SearchTools(ctx, client.ToolQuery{Query: "convert dollars to euros", Limit: 3})
	if err != nil {
		log.Fatal(err)
	}
	top := res.Results[0]
	fmt.Println(top.Tool.Name, top.Tool.Server)
	// Output:
	// currency_convert finance
}

func ExampleClient_Publish_invalid() {
	ctx := context.Background()
	c, err := client.Connect(ctx, client.Config{URL: natsURL, Tenant: tenant})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	rating := 1.5
	_, err = c.Publish(ctx, client.ToolExecuted{ToolName: "web search", Success: true, LLMRating: &rating})
	var invalid *client.ValidationError
	if errors.As(err, &invalid) {
		for _, p := range invalid.Problems {
			fmt.Println(p.Field, "→", p.Message)
		}
	}
	// Output:
	// /llm_rating → got 1.5, want <= 1
	// /tool_name → "web search" does not match pattern ^[A-Za-z0-9_.:/-]{1,128}$
}

func ExampleClient_SubscribeAlerts() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Connect(ctx, client.Config{URL: natsURL, Tenant: tenant})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	alerts := make(chan client.Alert, 10)
	if err := c.SubscribeAlerts(ctx, "", func(a client.Alert) { alerts <- a }); err != nil {
		log.Fatal(err)
	}
	// A tool that worked, then stops working.
	for i := range 42 {
		if _, err := c.Publish(ctx, client.ToolExecuted{ToolName: "kb_search", Success: i < 30}); err != nil {
			log.Fatal(err)
		}
	}
	for range 2 {
		a := <-alerts
		fmt.Printf("%s: %s → %s\n", a.ToolName, a.PreviousState, a.State)
	}
	// Output:
	// kb_search: warning → degraded
	// kb_search: degraded → quarantined
}
