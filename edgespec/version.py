"""edgespec's version (``edgespec.__version__``), in a module of its own so that the
package's modules can name it without importing the package's public namespace."""

__version__ = "0.1.0"
