package netstack

// SetDirectOutput turns the short TCP output path on or off for a test
// and returns the function that puts it back.
func SetDirectOutput(on bool) (restore func()) {
	prev := directOutput
	directOutput = on
	return func() { directOutput = prev }
}

// SetDirectBody turns direct response body reads on or off for a test and
// returns the function that puts it back.
func SetDirectBody(on bool) (restore func()) {
	prev := directBody
	directBody = on
	return func() { directBody = prev }
}
