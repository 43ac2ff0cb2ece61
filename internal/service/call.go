package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/agentq/agentq/internal/bus"
)

// Call sends req to subject and waits for the reply until ctx ends. req is
// marshalled as JSON, except a []byte or json.RawMessage, which is sent as
// it is. An error reply is returned as an *Error (find it with errors.As);
// a success reply is decoded into resp, unless resp is nil. When nothing
// serves subject, the error wraps nats.ErrNoResponders and is marked
// bus.Unavailable; when ctx ends first, it wraps ctx's error.
func Call(ctx context.Context, nc *nats.Conn, subject string, req any, resp any) error {
	var data []byte
	switch r := req.(type) {
	case []byte:
		data = r
	case json.RawMessage:
		data = r
	default:
		var err error
		if data, err = json.Marshal(req); err != nil {
			return fmt.Errorf("%s: marshal request: %w", subject, err)
		}
	}
	msg, err := nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return bus.Unavailable(fmt.Errorf("%s: %w", subject, err))
		}
		return fmt.Errorf("%s: %w", subject, err)
	}
	return decodeReply(subject, msg, resp)
}

// decodeReply returns the *Error of an error reply, or decodes a success
// reply into resp. Error replies are recognised by micro's error-code
// header, which every error reply carries, so a success is parsed once.
func decodeReply(subject string, msg *nats.Msg, resp any) error {
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		var env struct {
			Error *Error `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &env); err == nil && env.Error != nil && env.Error.Code != "" {
			return env.Error
		}
		// Not agentq's body (another micro service): keep micro's parts.
		return &Error{Code: code, Message: msg.Header.Get(micro.ErrorHeader)}
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(msg.Data, resp); err != nil {
		return fmt.Errorf("%s: decode reply: %w", subject, err)
	}
	return nil
}
