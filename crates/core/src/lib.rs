//! LABIOS core (article 3.3.2): the administrator and the label dispatcher.
