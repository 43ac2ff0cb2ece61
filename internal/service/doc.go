// Package service serves agentq's request/reply endpoints on core NATS
// (search.prompts.<tenant>, search.tools.<tenant>, prompts.get.<tenant>) as
// a nats.go micro service, and calls them.
//
// A Service is one micro service instance in a queue group, so every copy
// of a consumer serves and each request is answered by exactly one copy;
// micro's PING, INFO and STATS verbs come with it. An endpoint serves
// <prefix>.* and takes the tenant from the subject's last token. Each
// request is checked (tenant, then the request schema), handed to a
// Handler with a deadline, and always answered: the handler's value as
// JSON, or {"error":{"code":...,"message":...}} with the micro error
// headers. A client never has to wait for its own timeout to learn that a
// request failed, short of the service being down: a request that finds
// every slot and waiting place taken is answered overloaded at once, one
// that waits past its deadline timeout, and a reply over the NATS max
// payload too_large. Handlers that overstay never keep other requests
// from an answer, since taking requests off the subscription never waits.
//
// Call is the client side: it sends a request and returns the decoded reply
// or the service's *Error.
package service
