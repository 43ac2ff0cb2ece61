package indexer

// WarnStale is warnStale, for tests.
var WarnStale = warnStale
