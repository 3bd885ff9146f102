"""Images and files: the export table (formats: one entry per extension; importing it loads no Qt),
a scene to SVG / PNG / PDF (image_export, svg_stream), the legend with its swatches and structure row
(also the window's colour bar), and the attribution figure. Imports scene, parts and primitives; Qt is
loaded inside the image writers, when they draw.
"""
