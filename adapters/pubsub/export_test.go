package pubsub

// The event feed's statements, for the plan test.
var (
	FeedPageSQL = feedPageSQL
	FeedPollSQL = feedPollSQL
)
