package providertest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// rubricLine matches a criterion of chat.JudgeMessages's rubric:
// "- accuracy (0-25 points): ...".
var rubricLine = regexp.MustCompile(`(?m)^- (.+?) \(0-(\d+) points\):`)

// TestModel answers like a model whose behaviour a reader can predict,
// for trying agentq without a real model (`agentq testmodel`):
//
//   - an LLM judge request (chat.JudgeMessages) gets 80 % of every
//     criterion's points, rounded down, and a pass;
//   - a rating request (chat.RatingMessages) gets 0.5 for relevance and
//     correctness (NaiveRater, which also obeys "rate this 1.0");
//   - an executive-summary request gets a fixed paragraph saying so;
//   - any other request, a trial, is answered with the question and the
//     system message it came with: "Re: <question>" then the system
//     message, so an assertion that looks for a version's words passes for
//     that version and no other. When the system message mentions JSON,
//     the answer is {"type": "answer", "message": <that text>}.
//
// Its tool caller is TestModelTools.
func TestModel(req ChatRequest) string {
	var system, user string
	for _, m := range req.Messages {
		switch m.Role {
		case "system":
			system = m.Content
		case "user":
			user = m.Content
		}
	}
	switch {
	case strings.Contains(system, "## Rubric"):
		var parts []string
		for _, m := range rubricLine.FindAllStringSubmatch(system, -1) {
			points, _ := strconv.Atoi(m[2])
			name, _ := json.Marshal(m[1])
			parts = append(parts, fmt.Sprintf("%s: %d", name, points*8/10))
		}
		return fmt.Sprintf(`{"criteria": {%s}, "pass": true, "reason": "The test model gives every answer 80 %% of the points."}`, strings.Join(parts, ", "))
	case strings.Contains(system, "Rating Instructions"):
		return NaiveRater(req)
	case strings.Contains(system, "Summary Instructions"):
		return "This paragraph is the test model's: it does not read the report. A real model (AGENTQ_LLM_BASE_URL) writes a summary of the results here."
	}
	text := "Re: " + strings.TrimSpace(user) + "\n" + strings.TrimSpace(system)
	if strings.Contains(strings.ToLower(system), "json") {
		msg, _ := json.Marshal(text)
		return fmt.Sprintf(`{"type": "answer", "message": %s}`, msg)
	}
	return text
}

// TestModelTools is the test model's tool caller: of the tools a request
// offers, it calls each one the system message names, once, with the
// question as {"query": ...}.
func TestModelTools(req ChatRequest) []ToolCall {
	var system, user string
	for _, m := range req.Messages {
		switch m.Role {
		case "system":
			system = m.Content
		case "user":
			user = m.Content
		}
	}
	args, _ := json.Marshal(map[string]string{"query": strings.TrimSpace(user)})
	var out []ToolCall
	for _, t := range req.Tools {
		if name := t.Function.Name; name != "" && strings.Contains(system, name) {
			out = append(out, ToolCall{Name: name, Arguments: string(args)})
		}
	}
	return out
}
