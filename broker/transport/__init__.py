"""Transports: how the dialog protocol's frames reach another database.

``seam`` is the one interface the transmitter sends through; ``inprocess`` carries frames
between the databases of one instance, in the same process. The network endpoint between
instances implements the same seam.
"""
