//! LABIOS client (article 3.3.1).
