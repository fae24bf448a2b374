"""A party's release ledger underneath :mod:`fedpriv.privacy.releases`: the SQLite store
(:mod:`.store`), the state folder's checks (:mod:`.folder`) and the privacy events each release
row holds (:mod:`.events`)."""
