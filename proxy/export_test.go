package proxy

// TestTokenizer is the tokenizer the package's tests share, exported to the
// external test package.
var TestTokenizer = tokenizer
