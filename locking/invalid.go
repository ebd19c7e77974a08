package locking

// InvalidError is an ErrInvalid about one argument of a backend's options
// (its URL, say), typed so that a caller naming the argument itself (the
// config's validation: "locking.redis.url redis://h:6379: ...") can print
// only why it is bad, Reason, with no parsing of the message. It shows no
// secret: a backend redacts Subject and scrubs Reason.
//
// Its text is ErrInvalid's, then Subject and Reason:
// "locking: invalid argument: Redis URL redis://h:6379: unexpected option",
// or ErrInvalid's and Reason alone when Subject is empty.
type InvalidError struct {
	// Field is the argument at fault, as the backend's Options names it
	// in lower case: "url".
	Field string
	// Subject is what the text says before Reason: the backend and the
	// argument ("Redis URL redis://h:6379", "pg"). May be empty.
	Subject string
	// Reason is why the argument is bad, without Subject.
	Reason string
}

func (e *InvalidError) Error() string {
	if e.Subject == "" {
		return ErrInvalid.Error() + ": " + e.Reason
	}
	return ErrInvalid.Error() + ": " + e.Subject + ": " + e.Reason
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Unwrap() error { return ErrInvalid }
