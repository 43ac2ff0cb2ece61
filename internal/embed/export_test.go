package embed

// EmbedLexical exposes embedLexical to tests: Lexical's features at any
// power-of-two dimension.
var EmbedLexical = embedLexical
